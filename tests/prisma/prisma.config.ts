import { fileURLToPath } from 'node:url';
import { defineConfig } from 'prisma/config';

// `prisma generate` builds the client with WebAssembly and never runs the schema
// engine, yet the CLI downloads that binary first, which fails on a machine that
// reaches only the npm registry. Naming an existing file as the engine skips the
// download; nothing executes it (the tests run Prisma through @prisma/adapter-pg,
// with no engine binary at all).
process.env.PRISMA_SCHEMA_ENGINE_BINARY ??= fileURLToPath(import.meta.url);

export default defineConfig({ schema: fileURLToPath(new URL('./schema.prisma', import.meta.url)) });
