// Lint with type information, for the bugs a job runtime is prone to: a promise
// nobody awaits (a lost rejection, a write that silently never happens) and a
// promise passed where a callback is expected (an EventEmitter listener, a timer).
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', 'bench/peers/**', 'tests/prisma/generated/**', 'web/**', '.perf-tmp/**'] },
  {
    files: ['src/**/*.ts'],
    extends: [js.configs.recommended, ...tseslint.configs.recommended],
    languageOptions: {
      parserOptions: { project: './tsconfig.json', tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
      '@typescript-eslint/await-thenable': 'error',
      '@typescript-eslint/require-await': 'off',
      '@typescript-eslint/no-explicit-any': 'off',
      // postgres.js spells "no custom types" as Options<{}>.
      '@typescript-eslint/no-empty-object-type': 'off',
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', destructuredArrayIgnorePattern: '^_' }],
    },
  },
  // The Standard Schema spec's own interface, declared as the spec does (a namespace).
  { files: ['src/standard-schema.ts'], rules: { '@typescript-eslint/no-namespace': 'off' } },
);
