// e2e/conformance.mjs: runs the official MCP conformance suite
// (@modelcontextprotocol/conformance, server mode), one or more pinned
// versions of it one after the other, against the api at IDEMGATE_URL,
// through a token-adding reverse proxy, and checks each version's outcome
// against its own lists. scripts/conformance.sh installs the pinned Node
// and suites and runs this under e2e/run.sh --exec; run it that way.
//
//   node e2e/conformance.mjs [--suite active|all] [--results DIR]
//        --suite-bin FILE --expected-failures FILE.yml --accepted-warnings FILE.yml
//        [--suite-bin FILE --expected-failures FILE.yml --accepted-warnings FILE.yml ...]
//
// One group of --suite-bin, --expected-failures and --accepted-warnings per
// suite version, in that order. --suite: all (default: active and pending)
// or active. --results: keep the suites' results (one checks.json per
// scenario, under VERSION/PASS/) there; by default they go to a temporary
// directory removed at the end.
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
// Passes: each version runs once with the revision it picks per scenario
// (the pass "default": the suite's oldest scenarios at 2025-11-25, the ones
// 2026-07-28 introduced and the tasks extension's at 2026-07-28), and again
// with --spec-version 2026-07-28 (the pass "2026-07-28": every scenario that
// applies to that revision, at that revision) when the version knows it.
//
// The lists. An entry is SCENARIO (the whole scenario fails as expected) or
// SCENARIO/CHECK-ID (that check's FAILURE or WARNING is expected; every
// other check of the scenario must pass), under the section "server" (every
// pass) or "server-PASS" (that pass only), with its reason as a comment on
// its line or just above it. --expected-failures lists what needs the
// suite's own reference tools, prompts and resources; --accepted-warnings
// lists, by SCENARIO/CHECK-ID, the WARNING checks that are idemgate's
// design (it is sessionless). The suite fails a scenario on a FAILURE and
// on a WARNING check alike; it gets the listed scenarios as its baseline,
// and this script checks them check by check.
//
// Exit status: non-zero on a failure or warning the lists do not name, on a
// listed scenario or check that passed, and when this script's own checks
// fail: every entry must name a scenario the suite has and carry its
// reason, and every scenario a pass announced must have run. Every version
// runs even when an earlier one failed.
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
		"suite-bin": { type: "string", multiple: true },
		"expected-failures": { type: "string", multiple: true },
		"accepted-warnings": { type: "string", multiple: true },
		suite: { type: "string", default: "all" },
		results: { type: "string" },
	},
});
const bins = opts["suite-bin"] || die("--suite-bin is required");
const expectedFiles = opts["expected-failures"] || [];
const warningsFiles = opts["accepted-warnings"] || [];
if (expectedFiles.length !== bins.length || warningsFiles.length !== bins.length) {
	die("each --suite-bin needs its own --expected-failures and --accepted-warnings");
}
const target = new URL(process.env.IDEMGATE_URL || die("IDEMGATE_URL is not set"));
const token = process.env.IDEMGATE_TOKEN_ACME || die("IDEMGATE_TOKEN_ACME is not set");
const results = path.resolve(
	opts.results || fs.mkdtempSync(path.join(process.env.TMPDIR || "/tmp", "idemgate-conformance-")),
);
fs.mkdirSync(results, { recursive: true });

// The passes, by name: the extra arguments of each.
const passes = { default: [], "2026-07-28": ["--spec-version", "2026-07-28"] };

// readList returns a list file's entries: {section, scenario, check, reason}
// (check null for a whole scenario), the reason being the comment on the
// entry's line or the comment lines just above it.
function readList(file) {
	const entries = [];
	let section = "";
	let comment = [];
	for (const raw of fs.readFileSync(file, "utf8").split("\n")) {
		const line = raw.trimEnd();
		const top = /^([a-z0-9-]+):\s*(#.*)?$/.exec(line);
		if (top) {
			section = top[1];
			if (section !== "server" && !(section.startsWith("server-") && section.slice(7) in passes)) {
				fail(`${file}: unknown section ${section} (server, or server-PASS with PASS one of ${Object.keys(passes).join(", ")})`);
			}
			comment = [];
			continue;
		}
		const c = /^\s*#\s?(.*)$/.exec(line);
		if (c) {
			comment.push(c[1]);
			continue;
		}
		const item = /^\s+-\s+([A-Za-z0-9_.-]+)(?:\/([A-Za-z0-9_.-]+))?\s*(?:#\s?(.*))?$/.exec(line);
		if (item) {
			if (!section) fail(`${file}: ${item[1]} is in no section`);
			const reason = [...comment, item[3] || ""].join(" ").trim();
			entries.push({ section, scenario: item[1], check: item[2] || null, reason, file });
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

// suite runs a suite's CLI under this Node with ARGS in CWD, collecting
// stdout (and echoing stdout and stderr when echo is set).
function suite(bin, args, echo, cwd) {
	return new Promise((resolve, reject) => {
		const child = spawn(process.execPath, [bin, ...args], {
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

// scenarioNames are the server scenarios a "list --server" printed.
const scenarioNames = (out) => new Set([...out.matchAll(/^\s+- (\S+)/gm)].map((m) => m[1]));

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

// checkVersion reads and checks one version's lists against the scenarios
// its suite has.
function checkVersion(v, known) {
	const entries = [
		...readList(v.expectedFile).map((e) => ({ ...e, kind: "failure" })),
		...readList(v.warningsFile).map((e) => ({ ...e, kind: "warning" })),
	];
	const seen = new Set();
	for (const e of entries) {
		const name = e.check ? `${e.scenario}/${e.check}` : e.scenario;
		if (!known.has(e.scenario)) fail(`${e.file}: ${e.scenario} is no server scenario of the suite ${v.version}`);
		if (!e.reason) fail(`${e.file}: ${name} has no reason (a comment on or above its line)`);
		if (e.kind === "warning" && !e.check) fail(`${e.file}: ${name} is not SCENARIO/CHECK-ID`);
		const key = `${e.section} ${name}`;
		if (seen.has(key)) fail(`${e.file}: ${name} is listed twice in ${e.section}`);
		seen.add(key);
	}
	for (const pass of Object.keys(passes)) {
		const here = entries.filter((e) => e.section === "server" || e.section === `server-${pass}`);
		for (const e of here) {
			if (!e.check && here.some((o) => o !== e && o.scenario === e.scenario)) {
				fail(`${e.file}: ${e.scenario} is listed whole and again in the pass ${pass}`);
			}
		}
	}
	return entries;
}

// runPass runs a version's suite in one pass, with the entries that apply
// to it, and returns its counts and exit status: the suite's, or 1 when
// this script's count disagrees.
async function runPass(v, pass, entries, applicable) {
	const label = `${v.version} ${pass}`;
	const dir = path.join(results, v.version, pass);
	fs.mkdirSync(dir, { recursive: true });
	const here = entries.filter(
		(e) => (e.section === "server" || e.section === `server-${pass}`) && applicable.has(e.scenario),
	);
	const whole = new Map(); // scenario -> entry
	const checks = new Map(); // scenario -> check id -> entry
	for (const e of here) {
		if (!e.check) {
			whole.set(e.scenario, e);
			continue;
		}
		if (!checks.has(e.scenario)) checks.set(e.scenario, new Map());
		checks.get(e.scenario).set(e.check, e);
	}
	// The suite's baseline: every scenario with a listed fault, checked
	// check by check below.
	const baseline = path.join(results, v.version, `baseline-${pass}.yml`);
	fs.writeFileSync(baseline, `server:\n${[...new Set([...whole.keys(), ...checks.keys()])].map((n) => `  - ${n}\n`).join("")}`);
	log(`[${label}] conformance server --suite ${[opts.suite, ...passes[pass]].join(" ")} (lists: ${v.expectedFile}, ${v.warningsFile})`);
	const started = Date.now();
	const run = await suite(
		v.bin,
		["server", "--url", proxyURL, "--suite", opts.suite, ...passes[pass], "--expected-failures", baseline, "-o", dir],
		true,
		dir,
	);
	let status = run.code;

	// The results the suite wrote: one directory per scenario run, with
	// checks.json.
	const ran = new Map();
	for (const sub of fs.readdirSync(dir)) {
		const file = path.join(dir, sub, "checks.json");
		if (!fs.existsSync(file)) continue;
		const m = /^server-(.+)-\d{4}-\d\d-\d\dT.*$/.exec(sub);
		ran.set(m ? m[1] : sub, JSON.parse(fs.readFileSync(file, "utf8")));
	}
	const count = { ran: ran.size, pass: 0, fail: 0, expected: 0, warned: 0, stale: 0, seconds: (Date.now() - started) / 1000 };
	const announced = /Running \S+ suite \((\d+) scenarios\)/.exec(run.out);
	if (!announced) {
		log(`[${label}] the suite did not say how many scenarios it runs`);
		return { count, status: 1, ran };
	}
	if (ran.size !== Number(announced[1])) {
		log(`[${label}] the suite announced ${announced[1]} scenarios; ${ran.size} wrote results`);
		status ||= 1;
	}
	const faultText = (c) => c.errorMessage || c.details?.message || c.description;
	for (const [name, got] of ran) {
		// The suite's rule: a FAILURE or a WARNING fails a scenario.
		const bad = got.filter((c) => c.status === "FAILURE" || c.status === "WARNING");
		if (whole.has(name)) {
			count[bad.length ? "expected" : "stale"]++;
			if (!bad.length) log(`[${label}] ${name} is listed in ${whole.get(name).file} but passed: remove it`);
			continue;
		}
		const listed = checks.get(name) || new Map();
		// A listed check: the expected failure of either status, or the
		// accepted warning (a WARNING only).
		const covered = (c) => {
			const e = listed.get(c.id);
			return e && (e.kind === "failure" || c.status === "WARNING");
		};
		const other = bad.filter((c) => !covered(c));
		const gone = [...listed.values()].filter((e) => !bad.some((c) => c.id === e.check && covered(c)));
		for (const c of other) log(`[${label}] UNEXPECTED ${c.status} ${name}: ${c.id}: ${faultText(c)}`);
		for (const e of gone) log(`[${label}] ${name}/${e.check} is listed in ${e.file} but did not occur: remove it`);
		if (other.length) {
			count.fail++;
		} else if (gone.length) {
			count.stale++;
		} else if (!bad.length) {
			count.pass++;
		} else if ([...listed.values()].some((e) => e.kind === "failure")) {
			count.expected++;
		} else {
			count.warned++;
		}
	}
	log(
		`[${label}] summary: ${ran.size} scenarios: ${count.pass} passed, ${count.fail} failed unexpectedly, ` +
			`${count.expected} failed as expected (the suite's reference tools, prompts, resources), ` +
			`${count.warned} passed but for accepted warnings, ${count.stale} listed but passed; ` +
			`${count.seconds.toFixed(1)} s; suite exit ${run.code}`,
	);
	if ((count.fail || count.stale) && status === 0) {
		log(`[${label}] the suite exited 0 although the counts above are not clean`);
		status = 1;
	}
	return { count, status, ran };
}

// runVersion runs one version's passes and returns its exit status.
async function runVersion(v) {
	const listed = await suite(v.bin, ["list", "--server"], false, results);
	if (listed.code !== 0) fail(`${v.version}: "conformance list --server" exited ${listed.code}`);
	const entries = checkVersion(v, scenarioNames(listed.out));
	const total = { ran: 0, pass: 0, fail: 0, expected: 0, warned: 0, stale: 0, seconds: 0 };
	const ranAnywhere = new Set();
	let status = 0;
	for (const pass of Object.keys(passes)) {
		// The scenarios of this pass: every one, or those of the revision.
		let applicable = scenarioNames(listed.out);
		if (passes[pass].length) {
			const l = await suite(v.bin, ["list", "--server", ...passes[pass]], false, results);
			applicable = l.code === 0 ? scenarioNames(l.out) : new Set();
			if (applicable.size === 0) {
				log(`[${v.version}] the suite cannot choose ${passes[pass].join(" ")} (no scenario for it): no pass ${pass}`);
				for (const e of entries.filter((e) => e.section === `server-${pass}`)) {
					log(`[${v.version}] note: ${e.scenario}${e.check ? `/${e.check}` : ""} is listed for the pass ${pass}, which this version has not`);
				}
				continue;
			}
		}
		const r = await runPass(v, pass, entries, applicable);
		status ||= r.status;
		for (const k of Object.keys(total)) total[k] += r.count[k];
		for (const name of r.ran.keys()) ranAnywhere.add(name);
	}
	for (const name of new Set(entries.map((e) => e.scenario))) {
		if (!ranAnywhere.has(name)) log(`[${v.version}] note: ${name} is listed but no pass ran it`);
	}
	v.total = total;
	return status;
}

const versions = bins.map((bin, i) => {
	const file = path.resolve(bin);
	const pkg = JSON.parse(fs.readFileSync(path.join(path.dirname(file), "..", "package.json"), "utf8"));
	return { bin: file, version: pkg.version, expectedFile: expectedFiles[i], warningsFile: warningsFiles[i] };
});
let status = 0;
try {
	for (const v of versions) {
		try {
			status = (await runVersion(v)) || status;
		} catch (err) {
			log(`[${v.version}] ${err.message}`);
			status = 1;
		}
	}
	for (const v of versions) {
		const t = v.total;
		if (!t) {
			log(`${v.version}: did not run to the end`);
			continue;
		}
		log(
			`${v.version}: ${t.ran} scenario runs: ${t.pass} passed, ${t.fail} failed unexpectedly, ${t.expected} failed as expected, ` +
				`${t.warned} passed but for accepted warnings, ${t.stale} listed but passed; ${t.seconds.toFixed(1)} s`,
		);
	}
} finally {
	proxy.closeAllConnections();
	proxy.close();
	if (!opts.results) fs.rmSync(results, { recursive: true, force: true });
}
process.exit(status);
