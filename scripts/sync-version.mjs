// Writes package.json's version into src/version.ts (npm's `version` script runs it after a bump).
import { readFileSync, writeFileSync } from 'node:fs';

const { version } = JSON.parse(readFileSync('package.json', 'utf8'));
const file = 'src/version.ts';
writeFileSync(file, readFileSync(file, 'utf8').replace(/VERSION = '[^']*'/, `VERSION = '${version}'`));
