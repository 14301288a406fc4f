// Builds the package: copies the generated code (gen/ts at the repository's
// root, committed, made by `make generate`) into gen/ here, then compiles
// src/, test/ and gen/ into dist/ with tsc.
import { cpSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
rmSync(join(pkg, "gen"), { recursive: true, force: true });
rmSync(join(pkg, "dist"), { recursive: true, force: true });
cpSync(join(pkg, "..", "..", "gen", "ts"), join(pkg, "gen"), { recursive: true });
try {
  execFileSync(process.execPath, [join(pkg, "node_modules", "typescript", "bin", "tsc"), "-p", pkg], { stdio: "inherit" });
} catch {
  process.exit(1); // tsc printed why
}
