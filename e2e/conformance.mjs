// e2e/conformance.mjs: runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, server mode) against the api at
// IDEMGATE_URL, through a token-adding reverse proxy, and checks the outcome
// against an expected-failures file. scripts/conformance.sh installs the
// pinned Node and suite and runs this under e2e/run.sh --exec; run it that way.
//
//   node e2e/conformance.mjs --suite-bin FILE --expected-failures FILE.yml
//        [--accepted-warnings FILE.yml] [--suite active|all] [--results DIR]
//
// --suite: all (default: active and pending) or active. --results: keep the
// suite's results (one checks.json per scenario) there; by default they go
// to a temporary directory removed at the end.
//
// Environment: IDEMGATE_URL (the api), IDEMGATE_TOKEN_ACME (a seeded token).
//
// The suite cannot send an Authorization header: the proxy (127.0.0.1, a
// port the kernel picks) forwards every request unchanged, Host and Origin
// included (the suite's DNS-rebinding scenario must reach the api as sent),
// adding "Authorization: Bearer $IDEMGATE_TOKEN_ACME". Bodies stream both
// ways (SSE answers included); a client that goes away aborts the upstream
// request.
//
// The suite fails a scenario on a FAILURE check and on a WARNING check
// alike. --accepted-warnings lists SCENARIO/CHECK-ID of the warnings that
// are idemgate's design (it is sessionless); such a scenario passes when its
// only faults are exactly those warnings.
//
// Exit status: non-zero on a failure or warning the files do not list, on a
// listed scenario (or warning) that passed, and when this script's own
// checks fail: every entry must name a scenario the suite has and carry its
// reason as a comment, and every scenario announced must have run.
import { spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import path from "node:path";
import { parseArgs } from "node:util";

const log = (msg) => process.stderr.write(`conformance: ${msg}\n`);
const die = (msg) => {
	log(msg);
	process.exit(1);
};
const fail = (msg) => {
	throw new Error(msg);
};

const { values: opts } = parseArgs({
	options: {
		"suite-bin": { type: "string" },
		"expected-failures": { type: "string" },
		"accepted-warnings": { type: "string" },
		suite: { type: "string", default: "all" },
		results: { type: "string" },
	},
});
const suiteBin = path.resolve(opts["suite-bin"] || die("--suite-bin is required"));
const expectedFile = opts["expected-failures"] || die("--expected-failures is required");
const warningsFile = opts["accepted-warnings"];
const target = new URL(process.env.IDEMGATE_URL || die("IDEMGATE_URL is not set"));
const token = process.env.IDEMGATE_TOKEN_ACME || die("IDEMGATE_TOKEN_ACME is not set");
const results = path.resolve(
	opts.results || fs.mkdtempSync(path.join(process.env.TMPDIR || "/tmp", "idemgate-conformance-")),
);
fs.mkdirSync(results, { recursive: true });

// readExpected returns the file's server entries, each with its reason: the
// comment on its line, or the comment lines just above it.
function readExpected(file) {
	const entries = [];
	let section = "";
	let comment = [];
	for (const raw of fs.readFileSync(file, "utf8").split("\n")) {
		const line = raw.trimEnd();
		const top = /^([a-z]+):\s*(#.*)?$/.exec(line);
		if (top) {
			section = top[1];
			comment = [];
			continue;
		}
		const c = /^\s*#\s?(.*)$/.exec(line);
		if (c) {
			comment.push(c[1]);
			continue;
		}
		const item = /^\s+-\s+([A-Za-z0-9_./-]+)\s*(?:#\s?(.*))?$/.exec(line);
		if (item) {
			const reason = [...comment, item[2] || ""].join(" ").trim();
			if (section === "server") entries.push({ scenario: item[1], reason });
			comment = [];
			continue;
		}
		if (line.trim() === "") {
			comment = [];
			continue;
		}
		fail(`${file}: cannot read line ${JSON.stringify(line)}`);
	}
	return entries;
}

// suite runs the suite's CLI under this Node with ARGS in CWD, collecting
// stdout (and echoing stdout and stderr when echo is set).
function suite(args, echo, cwd) {
	return new Promise((resolve, reject) => {
		const child = spawn(process.execPath, [suiteBin, ...args], {
			stdio: ["ignore", "pipe", "pipe"],
			cwd,
		});
		child.stderr.on("data", (b) => echo && process.stderr.write(b));
		let out = "";
		child.stdout.on("data", (b) => {
			out += b;
			if (echo) process.stdout.write(b);
		});
		child.on("error", reject);
		child.on("close", (code, signal) => resolve({ code: signal ? 1 : code, out }));
	});
}

// The token-adding proxy.
const proxy = http.createServer((req, res) => {
	const headers = { ...req.headers, authorization: `Bearer ${token}` };
	const up = http.request(
		{ host: target.hostname, port: target.port, method: req.method, path: req.url, headers },
		(upRes) => {
			res.writeHead(upRes.statusCode, upRes.statusMessage, upRes.headers);
			upRes.pipe(res);
		},
	);
	up.on("error", (err) => {
		if (!res.headersSent) {
			res.writeHead(502, { "content-type": "text/plain" });
			res.end(`conformance proxy: ${err.message}\n`);
		} else {
			res.destroy();
		}
	});
	res.on("close", () => {
		if (!res.writableFinished) up.destroy(); // the suite went away
	});
	req.pipe(up);
});
await new Promise((resolve) => proxy.listen(0, "127.0.0.1", resolve));
const proxyURL = `http://127.0.0.1:${proxy.address().port}/mcp`;
log(`proxy ${proxyURL} -> ${target.origin}/mcp (adding the token of acme/support-bot)`);

// runPass runs the suite's SUITE scenarios (EXTRA narrows them, e.g. to a
// spec version) into their own results directory and returns the exit
// status: the suite's, or 1 when this script's own count disagrees.
async function runPass(label, extra, expected, accepted) {
	const dir = path.join(results, label);
	fs.mkdirSync(dir, { recursive: true });
	// The suite's baseline: the expected failures and the scenarios whose
	// only fault is an accepted warning (checked by check id below).
	const baseline = path.join(results, `baseline-${label}.yml`);
	fs.writeFileSync(
		baseline,
		`server:\n${[...expected.map((e) => e.scenario), ...accepted.keys()].map((n) => `  - ${n}\n`).join("")}`,
	);
	log(
		`[${label}] conformance server --suite ${[opts.suite, ...extra].join(" ")} --expected-failures ${expectedFile}` +
			(warningsFile ? ` and the warnings of ${warningsFile}` : ""),
	);
	const run = await suite(
		["server", "--url", proxyURL, "--suite", opts.suite, ...extra, "--expected-failures", baseline, "-o", dir],
		true,
		dir,
	);
	let status = run.code;

	// The summary, from the results the suite wrote: one directory per
	// scenario run, with checks.json.
	const ran = new Map();
	for (const sub of fs.readdirSync(dir)) {
		const file = path.join(dir, sub, "checks.json");
		if (!fs.existsSync(file)) continue;
		const m = /^server-(.+)-\d{4}-\d\d-\d\dT.*$/.exec(sub);
		const checks = JSON.parse(fs.readFileSync(file, "utf8"));
		ran.set(m ? m[1] : sub, checks);
	}
	const started = /Running \S+ suite \((\d+) scenarios\)/.exec(run.out);
	if (!started) {
		log(`[${label}] the suite did not say how many scenarios it runs`);
		return 1;
	}
	if (ran.size !== Number(started[1])) {
		log(`[${label}] the suite announced ${started[1]} scenarios; ${ran.size} wrote results`);
		status ||= 1;
	}
	const listed = new Set(expected.map((e) => e.scenario));
	const count = { pass: 0, fail: 0, expected: 0, warned: 0, stale: 0 };
	for (const [name, checks] of ran) {
		// The suite's rule: a FAILURE or a WARNING fails a scenario.
		const bad = checks.filter((c) => c.status === "FAILURE" || c.status === "WARNING");
		if (listed.has(name)) {
			count[bad.length ? "expected" : "stale"]++;
			if (!bad.length) log(`[${label}] ${name} is listed in ${expectedFile} but passed: remove it`);
		} else if (accepted.has(name)) {
			const ids = accepted.get(name);
			const other = bad.filter((c) => c.status === "FAILURE" || !ids.has(c.id));
			if (other.length) {
				count.fail++;
				for (const c of other) log(`[${label}] UNEXPECTED ${c.status} ${name}: ${c.id}: ${c.errorMessage || c.details?.message || c.description}`);
			} else if ([...ids].some((id) => !bad.some((c) => c.id === id))) {
				count.stale++;
				for (const id of ids) {
					if (!bad.some((c) => c.id === id)) log(`[${label}] ${name}/${id} is listed in ${warningsFile} but was not warned: remove it`);
				}
			} else {
				count.warned++;
			}
		} else if (bad.length) {
			count.fail++;
			for (const c of bad) log(`[${label}] UNEXPECTED ${c.status} ${name}: ${c.id}: ${c.errorMessage || c.details?.message || c.description}`);
		} else {
			count.pass++;
		}
	}
	for (const name of [...listed, ...accepted.keys()]) {
		if (!ran.has(name)) log(`[${label}] note: ${name} is listed but was not run`);
	}
	log(
		`[${label}] summary: ${ran.size} scenarios: ${count.pass} passed, ${count.fail} failed unexpectedly, ` +
			`${count.expected} failed as expected (reference tools, prompts, resources), ` +
			`${count.warned} passed but for accepted warnings, ${count.stale} listed but passed; suite exit ${run.code}`,
	);
	if ((count.fail || count.stale) && status === 0) {
		log(`[${label}] the suite exited 0 although the counts above are not clean`);
		status = 1;
	}
	return status;
}

let status = 0;
try {
	const expected = readExpected(expectedFile);
	const accepted = new Map(); // scenario -> the ids of its accepted warnings
	for (const w of warningsFile ? readExpected(warningsFile) : []) {
		const [scenario, id] = w.scenario.split("/");
		if (!id) fail(`${warningsFile}: ${w.scenario} is not SCENARIO/CHECK-ID`);
		if (!w.reason) fail(`${warningsFile}: ${w.scenario} has no reason (a comment on or above its line)`);
		if (expected.some((e) => e.scenario === scenario)) fail(`${scenario} is in both ${expectedFile} and ${warningsFile}`);
		if (!accepted.has(scenario)) accepted.set(scenario, new Set());
		accepted.get(scenario).add(id);
	}
	const listed = await suite(["list", "--server"], false, results);
	if (listed.code !== 0) fail(`"conformance list --server" exited ${listed.code}`);
	const known = new Set([...listed.out.matchAll(/^\s+- (\S+)/gm)].map((m) => m[1]));
	for (const name of accepted.keys()) {
		if (!known.has(name)) fail(`${warningsFile}: ${name} is no server scenario of the suite`);
	}
	for (const e of expected) {
		if (!known.has(e.scenario)) fail(`${expectedFile}: ${e.scenario} is no server scenario of the suite`);
		if (!e.reason) fail(`${expectedFile}: ${e.scenario} has no reason (a comment on or above its line)`);
	}

	// Every scenario the suite has (their spec versions are 2025-06-18 and
	// 2025-11-25; the suite's client is the TypeScript SDK, which speaks
	// 2025-11-25).
	status = await runPass("2025-11-25", [], expected, accepted);

	// The 2026-07-28 revision, when the suite can choose it: 0.1.16 cannot
	// ("Unknown spec version"; it knows 2025-03-26, 2025-06-18, 2025-11-25,
	// draft and extension, and draft has no server scenario). A later pin
	// that can runs here too.
	const next = await suite(["list", "--server", "--spec-version", "2026-07-28"], false, results);
	const nextScenarios = [...next.out.matchAll(/^\s+- (\S+)/gm)];
	if (next.code === 0 && nextScenarios.length > 0) {
		status ||= await runPass("2026-07-28", ["--spec-version", "2026-07-28"], expected, accepted);
	} else {
		log("the suite cannot choose the 2026-07-28 revision (it has no scenario for it): not run on 2026-07-28");
	}
} catch (err) {
	log(err.message);
	status = 1;
} finally {
	proxy.closeAllConnections();
	proxy.close();
	if (!opts.results) fs.rmSync(results, { recursive: true, force: true });
}
process.exit(status);
