// The package's `prepare` script (npm runs it before `npm pack` and when a checkout's
// directory is installed): builds dist/ with the TypeScript compiler of this package's
// lockfile. In a fresh clone nothing is installed yet (`npm pack ./clients/typescript`
// failed: `tsc: not found`), so the dev dependencies are installed from the lockfile
// first, as npm itself does for a package installed from git.
import { spawnSync } from "node:child_process";
import { existsSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const root = dirname(dirname(fileURLToPath(import.meta.url)));
const tsc = join(root, "node_modules", "typescript", "bin", "tsc");

function run(command, args, env = process.env) {
  const done = spawnSync(command, args, { cwd: root, stdio: "inherit", env });
  if (done.error) throw done.error;
  if (done.status !== 0) process.exit(done.status ?? 1);
}

if (!existsSync(tsc)) {
  console.error("@m3grpc/client: installing its build tools from package-lock.json (npm ci)");
  // The npm that runs this script; without scripts, so this one does not run again.
  const npm = process.env.npm_execpath;
  const args = ["ci", "--ignore-scripts", "--no-audit", "--no-fund"];
  // `npm pack --dry-run` would make the install a dry run too.
  const env = { ...process.env };
  delete env.npm_config_dry_run;
  if (npm) run(process.execPath, [npm, ...args], env);
  else run("npm", args, env);
}
run(process.execPath, [tsc, "-p", "tsconfig.json"]);
