// Starting and stopping `deltafin serve` on a synth model for the server tests, and the
// independent references they compare against (deltafin tokenize / run / detokenize).
import { execFileSync, spawn } from "node:child_process";
import { mkdtempSync, rmSync, writeFileSync } from "node:fs";
import { tmpdir } from "node:os";
import { join } from "node:path";

export const DF = process.env.DF ?? new URL("../../build/deltafin", import.meta.url).pathname;
export const MODEL_ID = "deltafin-kimi-k3";

export function scratch() {
  const base = process.env.DF_TEST_TMP ?? tmpdir();
  return mkdtempSync(join(base, "serve-"));
}

export function synth(dir, preset = "tiny", extra = []) {
  const out = join(dir, preset + (extra.length ? "-" + extra.join("").replace(/[^a-z0-9]/gi, "") : ""));
  execFileSync(DF, ["synth", "--preset", preset, "--seed", "3", "--out", out, "--quiet", ...extra], { stdio: "ignore" });
  return out;
}

// The small trained model that ships in models/k3-mini: it answers, thinks and calls tools.
export const BUNDLED = new URL("../../models/k3-mini", import.meta.url).pathname;

// Starts the server and resolves once it listens; log lines accumulate in server.log. The model
// is named MODEL_ID unless alias says otherwise (null: the model's own name, its directory's).
export function startServer(model, args = [], env = {}, alias = MODEL_ID) {
  return new Promise((resolve, reject) => {
    const named = alias === null ? [] : ["--alias", alias];
    const child = spawn(DF, ["serve", "--model", model, "--port", "0", ...named, ...args], {
      env: { ...process.env, ...env }, stdio: ["ignore", "ignore", "pipe"],
    });
    const server = { child, log: "", url: null };
    child.stderr.setEncoding("utf8");
    child.stderr.on("data", (s) => {
      server.log += s;
      const m = server.log.match(/listening on (http:\/\/[^ ]+)/);
      if (m && !server.url) {
        server.url = m[1];
        resolve(server);
      }
    });
    child.on("exit", (code) => { if (!server.url) reject(new Error(`serve exited ${code}: ${server.log}`)); });
  });
}

export function stopServer(server) {
  return new Promise((resolve) => {
    if (server.child.exitCode !== null) return resolve(server.child.exitCode);
    server.child.on("exit", (code) => resolve(code));
    server.child.kill("SIGTERM");
  });
}

export function tokenizeChat(model, dir, request) {
  const f = join(dir, "req.json");
  writeFileSync(f, JSON.stringify(request));
  return execFileSync(DF, ["tokenize", "--model", model, "--chat", f], { encoding: "utf8" }).trim().split(/\s+/).map(Number);
}

export function tokenizeText(model, text) {
  return execFileSync(DF, ["tokenize", "--model", model], { input: text, encoding: "utf8" }).trim().split(/\s+/).map(Number);
}

// `deltafin run` from token ids: the ids it generates (greedy, unless extra sampling flags).
export function runIds(model, ids, maxNew, extra = []) {
  const out = execFileSync(DF, ["run", "--model", model, "--tokens", ids.join(" "), "--max-new", String(maxNew), ...extra], {
    encoding: "utf8", stdio: ["ignore", "pipe", "ignore"],
  });
  return out.trim().split(/\s+/).filter((s) => s.length).map(Number);
}

export function detokenize(model, ids) {
  return execFileSync(DF, ["detokenize", "--model", model], { input: ids.join(" "), encoding: "utf8" });
}

export function cleanup(dir) { rmSync(dir, { recursive: true, force: true }); }
