// Builds the dashboard into server/internal/webui/assets, which the
// jobplane binary embeds: copies the generated code (gen/ts at the
// repository's root, made by `make generate`) into gen/ here, checks the
// types with tsc, and bundles src/ with esbuild into app.js and app.css
// beside index.html.
import { cpSync, mkdirSync, readdirSync, rmSync } from "node:fs";
import { execFileSync } from "node:child_process";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";
import { build } from "esbuild";

const pkg = join(dirname(fileURLToPath(import.meta.url)), "..");
const root = join(pkg, "..");
const out = join(root, "server", "internal", "webui", "assets");

rmSync(join(pkg, "gen"), { recursive: true, force: true });
cpSync(join(root, "gen", "ts"), join(pkg, "gen"), { recursive: true });
try {
  execFileSync(process.execPath, [join(pkg, "node_modules", "typescript", "bin", "tsc"), "-p", pkg], { stdio: "inherit" });
} catch {
  process.exit(1); // tsc printed why
}
// Everything in out but its README is the build's.
mkdirSync(out, { recursive: true });
for (const f of readdirSync(out)) if (f !== "README.md") rmSync(join(out, f), { recursive: true, force: true });
await build({
  entryPoints: { app: join(pkg, "src", "main.tsx") }, // it imports style.css: app.css
  outdir: out,
  bundle: true,
  format: "esm",
  target: "es2022",
  minify: true,
  legalComments: "none",
  jsx: "automatic",
  jsxImportSource: "preact",
  logLevel: "warning",
});
cpSync(join(pkg, "index.html"), join(out, "index.html"));
