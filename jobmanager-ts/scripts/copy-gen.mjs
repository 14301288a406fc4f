// Copies the contract's generated TypeScript (../gen/ts, made by buf from
// ../proto) into src/gen, so that tsc compiles it beside our code and the
// generated imports of @bufbuild/protobuf resolve to this package's
// node_modules. src/gen is a build artifact (see .gitignore): never edit it.
import { cpSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
rmSync(join(root, "src/gen"), { recursive: true, force: true });
cpSync(join(root, "../gen/ts"), join(root, "src/gen"), { recursive: true });
