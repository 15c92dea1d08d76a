//! `modix history` on a store holding 10 M transitions.
//!
//! A real project runs one real 100-step loop (`modix go`, the trivial
//! command agent), so the database has the current schema and rows as the
//! engine writes them. Copies of that run's rows — runs, transitions,
//! invocations, messages, the blobs reused as the content-addressed store
//! reuses them — are then generated straight into SQLite, with ids, seqs,
//! numbers and times varied, until the store holds 10 M transitions: ~90,000
//! runs of 100 steps in a mix of statuses, and one long run of 1 M steps (a
//! long loop someone left running). Every invocation carries usage as a CLI
//! that reports it would. The generated project is kept under
//! `target/history-bench/` (keyed by schema version), so later runs skip
//! the generation; its time and size on disk are printed when it is made.
//!
//! Then the real binary is spawned for each view — the run list (table and
//! `--json`), one ordinary run (table and `--json`), the long run (table and
//! `--json`, each its last 1,000 steps as by default) and one invocation
//! (full and `--json`) — its output read through a pipe, and the medians
//! are printed beside a bare spawn and `modix --version`, with a pass or
//! fail against 50 ms; last, the long run's whole record (`--steps 0
//! --json`, 633 MB), against no goal.
//!
//! Run: `cargo bench --bench history` (MODIX_BENCH_RUNS=N samples per view).

use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::types::Value;
use rusqlite::{Connection, params};

/// Transitions the store must hold.
mod support;

const TOTAL: u64 = 10_000_000;
/// Steps of an ordinary run (the real one's loop bound gives it this many).
const STEPS: u32 = 100;
/// Steps of the long run.
const LONG_STEPS: u32 = 1_000_000;
/// How many runs from the newest the long run stands (so the default list
/// of 20 shows it).
const LONG_FROM_NEWEST: u64 = 5;
/// Bump when the generator changes what it writes: a new cache.
const GENERATOR: u32 = 2;
/// The goal for every view.
const GOAL: Duration = Duration::from_millis(50);
/// What a CLI that reports usage leaves on each invocation.
const USAGE: &str = r#"{"cost_usd":0.0412,"input_tokens":18250,"model":"claude-sonnet-4-5","output_tokens":912,"session_id":"5f0c2d9e-6b1a-4c3e-9d7f-2a8b1e4c6d10","turns":4}"#;

fn main() {
    let samples: usize = std::env::var("MODIX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(9);
    let bin = Path::new(env!("CARGO_BIN_EXE_modix"));
    let tmp = tempfile::tempdir().expect("tempdir");
    let home = tmp.path().join("home");
    std::fs::create_dir_all(&home).expect("home");
    let modix = |project: &Path| {
        let mut c = Command::new(bin);
        c.arg("--project")
            .arg(project)
            .env("HOME", &home)
            .env("MODIX_HOME", home.join("modix"))
            .env_remove("MODIX_PROJECT")
            .env("NO_COLOR", "1");
        c
    };

    // A real run first: the schema and the rows to copy.
    let template = tmp.path().join("template");
    write_project(&template);
    run_ok(modix(&template).args(["-q", "go", "benchmark"]));
    let schema = checkpointed_version(&template.join(".modix/modix.db"));
    let target = bin.parent().and_then(Path::parent).expect("target dir");
    let cache = target.join(format!("history-bench/schema-v{schema}-gen{GENERATOR}"));
    let project = cache.join("project");
    if !project.join(".modix/modix.db").exists() {
        generate(&template, &cache);
    }
    let db = project.join(".modix/modix.db");
    println!(
        "store: {} ({}); schema version {schema}",
        db.display(),
        disk_size(&db)
    );
    let (normal, long) = pick_runs(&db);

    let views: Vec<(String, Vec<String>)> = vec![
        ("list (table, 20 newest)".into(), args(&["history"])),
        ("list --json".into(), args(&["history", "--json"])),
        (
            format!("one run, {STEPS} steps (table)"),
            args(&["history", &normal]),
        ),
        (
            format!("one run, {STEPS} steps --json"),
            args(&["history", &normal, "--json"]),
        ),
        (
            "one invocation (full)".into(),
            args(&["history", &normal, "--invocation", "50"]),
        ),
        (
            "one invocation --json".into(),
            args(&["history", &normal, "--invocation", "50", "--json"]),
        ),
        (
            "run by short id (branch suffix)".into(),
            args(&["history", &normal[normal.len() - 8..].to_ascii_lowercase()]),
        ),
        (
            format!("long run, {LONG_STEPS} steps (table)"),
            args(&["history", &long]),
        ),
        (
            "long run, its last invocation".into(),
            args(&[
                "history",
                &long,
                "--invocation",
                &(LONG_STEPS - 2).to_string(),
            ]),
        ),
        (
            format!("long run, {LONG_STEPS} steps --json"),
            args(&["history", &long, "--json"]),
        ),
    ];
    // Asked for in full, the long run is 633 MB of JSON: timed to show what
    // streaming it costs, against no goal (no view of that size prints in
    // 50 ms).
    let whole = args(&["history", &long, "--json", "--steps", "0"]);
    let bare = time(samples, || {
        run_ok(&mut Command::new("true"));
        0
    });
    let version = time(samples, || run_ok(modix(&project).arg("--version")));
    println!(
        "modix history on {TOTAL} transitions (spawned binary, output read through a pipe; medians)"
    );
    line("bare spawn (true)", bare.0, None);
    line("modix --version", version.0, None);
    for (what, argv) in &views {
        let (took, bytes) = time(samples, || run_ok(modix(&project).args(argv)));
        line(what, took, Some(bytes));
    }
    let (took, bytes) = time(samples, || run_ok(modix(&project).args(&whole)));
    println!(
        "  {:<36}{:>10.1} ms  (no goal)     {bytes:>12} B out",
        "long run, all its steps --json",
        took.as_secs_f64() * 1e3
    );
}

fn args(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

/// Runs `cmd` with its output read through a pipe; the bytes it printed.
fn run_ok(cmd: &mut Command) -> usize {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut out = Vec::new();
    child
        .stdout
        .take()
        .expect("stdout")
        .read_to_end(&mut out)
        .expect("read");
    let mut err = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut err)
        .expect("read");
    let status = child.wait().expect("wait");
    assert!(status.success(), "{cmd:?} failed: {err}");
    out.len()
}

/// The median of `n` timed calls after one untimed (fewer when one call
/// takes seconds), and what the last printed.
fn time(n: usize, mut f: impl FnMut() -> usize) -> (Duration, usize) {
    let start = Instant::now();
    let mut bytes = f();
    let n = if start.elapsed() > Duration::from_secs(1) {
        n.min(3)
    } else {
        n
    };
    let mut took: Vec<Duration> = (0..n)
        .map(|_| {
            let start = Instant::now();
            bytes = f();
            start.elapsed()
        })
        .collect();
    took.sort();
    (took[took.len() / 2], bytes)
}

fn line(what: &str, took: Duration, bytes: Option<usize>) {
    let ms = took.as_secs_f64() * 1e3;
    match bytes {
        None => println!("  {what:<36}{ms:>10.1} ms"),
        Some(b) => {
            let verdict = if took < GOAL { "pass" } else { "FAIL" };
            println!(
                "  {what:<36}{ms:>10.1} ms  {verdict} (< {} ms)  {:>12} B out",
                GOAL.as_millis(),
                b
            );
        }
    }
}

/// The schema version of `db`, its WAL emptied into it (so the file alone
/// can be copied).
fn checkpointed_version(db: &Path) -> i64 {
    let conn = Connection::open(db).expect("open");
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
        .expect("checkpoint");
    conn.pragma_query_value(None, "user_version", |r| r.get(0))
        .expect("user_version")
}

/// `db` and its WAL, in bytes and GB.
fn disk_size(db: &Path) -> String {
    let size = |p: PathBuf| std::fs::metadata(p).map_or(0, |m| m.len());
    let mut wal = db.as_os_str().to_owned();
    wal.push("-wal");
    let (main, wal) = (size(db.to_path_buf()), size(wal.into()));
    format!(
        "{:.2} GB on disk: database {main} B, WAL {wal} B",
        (main + wal) as f64 / 1e9
    )
}

/// An ordinary finished run in the middle of the store, and the long run.
fn pick_runs(db: &Path) -> (String, String) {
    let conn = Connection::open(db).expect("open");
    let runs: i64 = conn
        .query_row("SELECT count(*) FROM runs", [], |r| r.get(0))
        .expect("count");
    let normal: String = conn
        .query_row(
            "SELECT id FROM runs WHERE status = 'succeeded' ORDER BY id LIMIT 1 OFFSET ?1",
            [runs / 2],
            |r| r.get(0),
        )
        .expect("a run");
    let long: String = conn
        .query_row(
            "SELECT id FROM runs ORDER BY id DESC LIMIT 1 OFFSET ?1",
            // The real run is newer than every generated one.
            [LONG_FROM_NEWEST as i64 + 1],
            |r| r.get(0),
        )
        .expect("the long run");
    (normal, long)
}

// ---------------------------------------------------------------- generation

/// The real run's rows, as stored.
struct Template {
    run: Vec<Value>,
    run_cols: Vec<String>,
    /// By seq: (row, the invocation row behind it, its messages).
    transitions: Vec<Vec<Value>>,
    invocations: Vec<Vec<Value>>,
    inv_cols: Vec<String>,
    messages: Vec<Vec<Value>>,
}

/// Every row of `sql`, every column, and the column names.
fn rows(conn: &Connection, sql: &str) -> (Vec<Vec<Value>>, Vec<String>) {
    let mut stmt = conn.prepare(sql).expect("prepare");
    let cols: Vec<String> = stmt.column_names().map(|c| c.to_string()).collect();
    let n = cols.len();
    let rows = stmt
        .query_map([], |r| (0..n).map(|i| r.get::<_, Value>(i)).collect())
        .expect("query")
        .collect::<Result<Vec<Vec<Value>>, _>>()
        .expect("rows");
    (rows, cols)
}

fn load_template(conn: &Connection) -> Template {
    let (mut run, run_cols) = rows(conn, "SELECT * FROM runs");
    assert_eq!(run.len(), 1, "one real run");
    let (transitions, _) = rows(conn, "SELECT * FROM transitions ORDER BY seq");
    let (invocations, inv_cols) = rows(conn, "SELECT * FROM invocations ORDER BY n");
    let (messages, _) = rows(conn, "SELECT * FROM messages ORDER BY id");
    assert_eq!(transitions.len(), STEPS as usize, "the real run's steps");
    Template {
        run: run.remove(0),
        run_cols,
        transitions,
        invocations,
        inv_cols,
        messages,
    }
}

/// Copies the template project into `cache` and fills its store with runs
/// until it holds [`TOTAL`] transitions (into a temporary folder renamed
/// at the end, so an interrupted generation leaves no half store).
fn generate(template: &Path, cache: &Path) {
    let started = Instant::now();
    let partial = cache.join("partial");
    let _ = std::fs::remove_dir_all(cache);
    std::fs::create_dir_all(partial.join(".modix")).expect("mkdir");
    for entry in std::fs::read_dir(template.join(".modix")).expect("read_dir") {
        let entry = entry.expect("entry");
        let name = entry.file_name();
        if entry.file_type().expect("type").is_file() && !name.to_string_lossy().contains("-") {
            std::fs::copy(entry.path(), partial.join(".modix").join(&name)).expect("copy");
        }
    }
    for dir in ["fsm"] {
        let to = partial.join(".modix").join(dir);
        std::fs::create_dir_all(&to).expect("mkdir");
        for entry in std::fs::read_dir(template.join(".modix").join(dir)).expect("read_dir") {
            let entry = entry.expect("entry");
            std::fs::copy(entry.path(), to.join(entry.file_name())).expect("copy");
        }
    }
    let db = partial.join(".modix/modix.db");
    // The template's WAL was checkpointed into the file when modix closed it.
    let conn = Connection::open(&db).expect("open");
    let t = load_template(&conn);
    // Nothing else reads it while it is made, and a failed generation is
    // thrown away: no journal, no syncs.
    let mode: String = conn
        .pragma_update_and_check(None, "journal_mode", "OFF", |r| r.get(0))
        .expect("journal off");
    assert_eq!(mode, "off");
    conn.pragma_update(None, "synchronous", "OFF")
        .expect("sync");
    conn.pragma_update(None, "cache_size", -1_000_000)
        .expect("cache");
    let mut g = Generator::new(&conn, &t);
    // Ordinary runs (an unfinished one stops a step short) until, with
    // the long run, the store holds TOTAL transitions.
    let (mut ordinary, mut planned) = (0u64, u64::from(LONG_STEPS - 1));
    while planned < TOTAL {
        planned += u64::from(steps_of(STEPS, status_of(ordinary)));
        ordinary += 1;
    }
    let runs = ordinary + 1;
    let long_at = runs - 1 - LONG_FROM_NEWEST;
    let mut written = 0u64;
    for k in 0..runs {
        if k % 1000 == 0 {
            conn.execute_batch("BEGIN").expect("begin");
        }
        written += if k == long_at {
            g.run(k, LONG_STEPS, "stopped")
        } else {
            g.run(k, STEPS, status_of(k - u64::from(k > long_at)))
        };
        if k % 1000 == 999 || k == runs - 1 {
            conn.execute_batch("COMMIT").expect("commit");
        }
    }
    drop(g);
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |_| Ok(()))
        .expect("WAL");
    drop(conn);
    std::fs::rename(&partial, cache.join("project")).expect("rename");
    println!(
        "generated {written} transitions in {runs} runs (+ the real one) in {:.1} s",
        started.elapsed().as_secs_f64()
    );
}

/// Run column `usage_*` for `n` invocations that each used [`USAGE`].
fn usage_total(column: &str, n: u32) -> Value {
    let usage: serde_json::Value = serde_json::from_str(USAGE).expect("usage");
    let n = f64::from(n);
    let field = |name: &str| usage[name].as_f64().expect("a number") * n;
    match column {
        "usage_invocations" | "usage_priced" => Value::Integer(n as i64),
        "usage_cost_usd" => Value::Real(field("cost_usd")),
        other => Value::Integer(field(other.trim_start_matches("usage_")) as i64),
    }
}

/// A mix of statuses, as a store used for a while holds: most runs
/// succeeded, some failed, a few were interrupted, stopped, or wait at a
/// gate, and some say running though their process is long gone.
fn status_of(k: u64) -> &'static str {
    match k % 100 {
        0..=6 => "failed",
        7..=9 => "interrupted",
        10 => "stopped",
        11 => "waiting",
        12 => "running",
        _ => "succeeded",
    }
}

/// An unfinished run stops a step short of its workflow's end.
fn steps_of(steps: u32, status: &str) -> u32 {
    match status {
        "succeeded" | "failed" => steps,
        _ => steps - 1,
    }
}

/// Milliseconds between runs' starts (~90,000 runs over ~10 months), and
/// between a run's steps.
const RUN_EVERY_MS: i64 = 300_000;
const STEP_EVERY_MS: i64 = 2_000;

struct Generator<'c> {
    t: &'c Template,
    run: rusqlite::Statement<'c>,
    invocation: rusqlite::Statement<'c>,
    transition: rusqlite::Statement<'c>,
    message: rusqlite::Statement<'c>,
    start_ms: i64,
    next_invocation: i64,
}

impl<'c> Generator<'c> {
    fn new(conn: &'c Connection, t: &'c Template) -> Self {
        let insert = |table: &str, cols: &[String]| {
            let marks: Vec<String> = (1..=cols.len()).map(|i| format!("?{i}")).collect();
            conn.prepare(&format!(
                "INSERT INTO {table} ({}) VALUES ({})",
                cols.join(", "),
                marks.join(", ")
            ))
            .expect("prepare")
        };
        let names = |table: &str| -> Vec<String> {
            let mut s = conn
                .prepare(&format!("SELECT name FROM pragma_table_info('{table}')"))
                .expect("columns");
            s.query_map([], |r| r.get(0))
                .expect("columns")
                .collect::<Result<_, _>>()
                .expect("columns")
        };
        let next_invocation: i64 = conn
            .query_row("SELECT max(id) + 1 FROM invocations", [], |r| r.get(0))
            .expect("max id");
        let now = jiff::Timestamp::now().as_millisecond();
        let runs = TOTAL.div_ceil(u64::from(STEPS)) as i64 + 1;
        Generator {
            t,
            run: insert("runs", &t.run_cols),
            invocation: insert("invocations", &t.inv_cols),
            transition: insert("transitions", &names("transitions")),
            message: insert("messages", &names("messages")),
            // The newest generated run starts a day before the real one.
            start_ms: now - 86_400_000 - runs * RUN_EVERY_MS,
            next_invocation,
        }
    }

    /// Writes run number `k` with `steps` transitions; returns `steps`.
    fn run(&mut self, k: u64, steps: u32, status: &str) -> u64 {
        let created = self.start_ms + k as i64 * RUN_EVERY_MS;
        let random = (u128::from(mix(k)) << 16) | u128::from(mix(!k) & 0xffff);
        let id = ulid::Ulid::from_parts(created as u64, random).to_string();
        let terminal = matches!(status, "succeeded" | "failed");
        let steps = steps_of(steps, status);
        let last_at = ts(created + i64::from(steps) * STEP_EVERY_MS);
        let mut row = self.t.run.clone();
        for (i, col) in self.t.run_cols.iter().enumerate() {
            row[i] = match col.as_str() {
                "id" => Value::Text(id.clone()),
                "epic" => Value::Text(format!("benchmark epic {k}")),
                "status" => Value::Text(status.into()),
                "current_state" => Value::Text(if terminal { "DONE" } else { "WORK" }.into()),
                "created_at" => Value::Text(ts(created)),
                "updated_at" => Value::Text(last_at.clone()),
                "ended_at" if terminal => Value::Text(last_at.clone()),
                "ended_at" => Value::Null,
                "status_reason" if status == "stopped" => Value::Text("stopped by a person".into()),
                "status_reason" if status == "interrupted" => {
                    Value::Text("interrupted by Ctrl-C".into())
                }
                usage if usage.starts_with("usage_") => usage_total(usage, steps - 1),
                _ => row[i].clone(),
            };
        }
        self.run
            .execute(rusqlite::params_from_iter(&row))
            .expect("run");
        for seq in 1..=steps {
            self.step(&id, created, seq, steps);
        }
        u64::from(steps)
    }

    /// Step `seq` of run `id`: its invocation (all but the first step have
    /// one, numbered `seq - 1`), its transition and its message.
    fn step(&mut self, id: &str, created: i64, seq: u32, steps: u32) {
        let t = self.t;
        let at_ms = created + i64::from(seq) * STEP_EVERY_MS;
        let at = ts(at_ms);
        // The template's step of the same kind: its first, its last (the
        // redirect to DONE) or one in the loop.
        let like = match seq {
            1 => 0,
            s if s == steps && s >= STEPS => STEPS as usize - 1,
            s => 1 + (s as usize - 2) % (STEPS as usize - 2),
        };
        let mut invocation_id = Value::Null;
        if seq > 1 {
            let n = seq - 1;
            let mut inv = t.invocations[like - 1].clone();
            let started = ts(at_ms - 1_500);
            for (i, col) in t.inv_cols.iter().enumerate() {
                inv[i] = match col.as_str() {
                    "id" => Value::Integer(self.next_invocation),
                    "run_id" => Value::Text(id.to_owned()),
                    "n" => Value::Integer(n.into()),
                    "attempt" => Value::Integer(n.into()),
                    "started_at" => Value::Text(started.clone()),
                    "ended_at" => Value::Text(at.clone()),
                    "pgid" => Value::Integer(10_000 + i64::from(seq % 50_000)),
                    "duration_ms" => Value::Integer(1_500),
                    "usage" => Value::Text(USAGE.into()),
                    _ => inv[i].clone(),
                };
            }
            self.invocation
                .execute(rusqlite::params_from_iter(&inv))
                .expect("invocation");
            invocation_id = Value::Integer(self.next_invocation);
            self.next_invocation += 1;
        }
        let tr = &t.transitions[like];
        // run_id, seq, at, from_state, event, to_state, attempt, bound,
        // agent, reason, redirected, invocation_id
        self.transition
            .execute(params![
                id,
                seq,
                at,
                tr[3],
                tr[4],
                tr[5],
                if seq > 1 { seq - 1 } else { 1 },
                tr[7],
                tr[8],
                tr[9],
                tr[10],
                invocation_id
            ])
            .expect("transition");
        let m = &t.messages[like];
        // id, run_id, seq, kind, state, payload, at
        self.message
            .execute(params![Value::Null, id, seq, m[3], m[4], m[5], at])
            .expect("message");
    }
}

/// SplitMix64: a ULID's random part, spread as a real one's is.
fn mix(k: u64) -> u64 {
    let mut z = k.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A time as stored: RFC 3339 UTC, milliseconds.
fn ts(ms: i64) -> String {
    let t = jiff::Timestamp::from_millisecond(ms).expect("time");
    format!("{t:.3}")
}

// ------------------------------------------------------------------ project

/// A project whose workflow loops one command agent (`echo`) until its
/// bound: [`STEPS`] transitions per run.
fn write_project(root: &Path) {
    let answer = r#"{"passed": true, "summary": "ok"}"#;
    support::loop_project(
        root,
        "bench_loop",
        serde_json::json!(["echo", answer]),
        STEPS - 2,
    );
}
