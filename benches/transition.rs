//! The engine's own cost per transition, beside the floor it stands on.
//!
//! Every agent-invoking, durably recorded transition must at least spawn a
//! process, read its JSON, insert a row and commit (WAL, synchronous=FULL).
//! This measures that floor and its parts, then real `modix` runs (the code
//! path of `modix go`) of workflows that fire an agent in a bounded loop, and
//! of ones that fire it once, all in the same process and interleaved so that
//! neighbour load hits them alike. Two kinds of step:
//!
//! - trivial: a command agent (`echo`) printing a 34-byte TestResult, no
//!   prompt, in a project of nine files;
//! - realistic: a planner's task spec first, then an agent whose prompt
//!   (rendered from a template with the epic and the task spec) is ~4.5 KB,
//!   whose context package (the task spec included) is ~2.5 KB at the first
//!   visit and ~11 KB at the loop's later ones (they carry the previous
//!   answer, as feedback and among the outputs), and whose output is ~3 KB
//!   and different at every step (it names its own pid), in a project of a
//!   few hundred files. Its floor spawns the same command with the same
//!   prompt on stdin and stores prompt, a loop step's context, output and
//!   the parsed answer in one row.
//!
//! For each it reports medians and the engine's cost as ratios to its floor:
//! per step (the long run's time less the short one's, per extra step),
//! amortised (the long run's time per transition, its start-up included —
//! the workspace is made once per run), and in the run (the long run's
//! steps timed by its own recorded transitions: no start-up variance in it,
//! the steadiest of the three). The floor is timed that way too: LOOPS
//! floor steps in a row, in a database of their own, as one span. A floor
//! step's median leaves out the steps whose commit copies the log into the
//! database (SQLite's automatic checkpoint, every ~135 realistic floor
//! steps, ~6.5 ms each here: ~50 µs a step on average), while a run's span
//! holds every step modix's log costs; so the engine's in-run step is set
//! beside the floor's in a row (its headline ratio), and beside the floor
//! step's median as before. Each round also times a long run of the same
//! two projects with `durability: pipelined` (the step's sync beside the
//! next agent's start; docs/record.md), in the run, against the same
//! floors. The realistic step has a third reference: its floor writing
//! what a modix step records (the rows of modix's schema, blobs by hash,
//! with plain SQLite; [`RecordFloor`]), which splits the engine's ratio
//! into what the record's shape costs and what the engine adds on top of
//! it. Then, from untimed runs, what reaches the disk per step: WAL
//! bytes (frames of 4 KiB + 24 B), write transactions (commit frames;
//! each is one fsync) and bytes stored once checkpointed —
//! beside the floor's. Last, the start-up of `modix validate` (a spawned
//! binary), beside a bare spawn.
//!
//! Run: `cargo bench --bench transition` (MODIX_BENCH_RUNS=N for more runs;
//! MODIX_BENCH_WRITE_PROJECTS=DIR only writes the two projects, to profile
//! `modix go` on them).

use std::ffi::OsString;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::LazyLock;
use std::time::{Duration, Instant};

use modix::bench::{CaptureLimits, ProcessSpec, inherited_env, run_process};
use rusqlite::Connection;

mod support;
use support::{common_files, loop_workflow, write_files};

/// Loop bound of the benchmark workflows: a long run has LOOPS more agent
/// steps than a short one.
const LOOPS: u32 = 200;
const ANSWER: &str = r#"{"passed": true, "summary": "ok"}"#;
/// The realistic agent: prints a ~3 KB TestResult naming its pid.
const REAL_SCRIPT: &str =
    r#"printf '{"passed": true, "failures": [], "summary": "pid %s. %s"}\n' "$$" "$0""#;
/// Files in the realistic project's tree (besides `.modix/`).
const REAL_FILES: usize = 300;

fn main() {
    // For profiling (`perf record modix go …`): write the two projects
    // under this folder and stop.
    if let Some(dir) = std::env::var_os("MODIX_BENCH_WRITE_PROJECTS") {
        let dir = Path::new(&dir);
        write_trivial_project(&dir.join("trivial"));
        write_real_project(&dir.join("real"));
        println!("wrote {0}/trivial and {0}/real", dir.display());
        return;
    }
    let runs: usize = std::env::var("MODIX_BENCH_RUNS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(12);
    let tmp = tempfile::tempdir().expect("tempdir");
    // Run workspaces go under the modix home: keep them in the temp dir.
    // SAFETY: set before any thread is started.
    unsafe { std::env::set_var("MODIX_HOME", tmp.path().join("home")) };
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let (_cancel_tx, cancel) = tokio::sync::watch::channel(false);

    let trivial_root = tmp.path().join("trivial");
    write_trivial_project(&trivial_root);
    let trivial = modix::bench::Project::load(&trivial_root);
    let real_root = tmp.path().join("real");
    let real_log = write_real_project(&real_root);
    let real = modix::bench::Project::load(&real_root);
    let real_prompt = real_prompt_sample(&real_root);
    // The same projects with `durability: pipelined` (each step's sync
    // beside the next agent's start), timed by their long runs alone.
    let trivial_p_root = tmp.path().join("trivial-pipelined");
    write_trivial_project(&trivial_p_root);
    pipelined(&trivial_p_root);
    let trivial_p = modix::bench::Project::load(&trivial_p_root);
    let real_p_root = tmp.path().join("real-pipelined");
    write_real_project(&real_p_root);
    pipelined(&real_p_root);
    let real_p = modix::bench::Project::load(&real_p_root);
    let real_context = real_context_sample(&real_root, &real_log);

    let floor_db = open_floor_db(&tmp.path().join("floor.db"));
    let trivial_row_db = open_floor_db(&tmp.path().join("floor-trivial-row.db"));
    let real_row_db = open_floor_db(&tmp.path().join("floor-real-row.db"));
    let record_db = RecordFloor::open(&tmp.path().join("floor-record.db"), &real_context);
    let record_row_db = RecordFloor::open(&tmp.path().join("floor-record-row.db"), &real_context);
    let mut spawn = Samples::default();
    let mut runner = Samples::default();
    let mut commit = Samples::default();
    let mut t = Scenario::default();
    let mut r = Scenario::default();
    let per_run = LOOPS as usize + 2;
    // Interleaved: each round runs every engine workflow once, then as many
    // samples of each floor as a long run has transitions, so neighbour load
    // drifting over the minutes hits every figure alike.
    for round in 0..=runs {
        let warm_up = round == 0;
        t.long.time(warm_up, || {
            assert_eq!(trivial.run("bench_loop", "benchmark"), per_run as u32);
        });
        t.in_run(warm_up, &trivial_root);
        assert_eq!(trivial_p.run("bench_loop", "benchmark"), per_run as u32);
        t.in_run_pipelined(warm_up, &trivial_p_root);
        t.once.time(warm_up, || {
            assert_eq!(trivial.run("bench_once", "benchmark"), 2);
        });
        r.long.time(warm_up, || {
            assert_eq!(real.run("real_loop", REAL_EPIC), per_run as u32 + 1);
        });
        r.in_run(warm_up, &real_root);
        assert_eq!(real_p.run("real_loop", REAL_EPIC), per_run as u32 + 1);
        r.in_run_pipelined(warm_up, &real_p_root);
        r.once.time(warm_up, || {
            assert_eq!(real.run("real_once", REAL_EPIC), 3);
        });
        for _ in 0..per_run {
            spawn.time(warm_up, || {
                let out = agent_command(&ECHO)
                    .arg(ANSWER)
                    .stdin(Stdio::null())
                    .output()
                    .expect("spawn");
                assert!(out.status.success());
            });
            runner.time(warm_up, || {
                let out = runtime
                    .block_on(run_process(&echo_spec(&ECHO, tmp.path()), cancel.clone()))
                    .expect("spawn");
                assert!(out.success());
            });
            commit.time(warm_up, || insert_trivial(&floor_db, "{}"));
            t.floor.time(warm_up, || trivial_floor(&floor_db));
            r.floor.time(warm_up, || {
                real_floor(&floor_db, &real_log, &real_prompt, &real_context)
            });
            r.record
                .time(warm_up, || record_db.step(&real_log, &real_prompt));
        }
        t.floor_in_a_row(warm_up, || trivial_floor(&trivial_row_db));
        r.floor_in_a_row(warm_up, || {
            real_floor(&real_row_db, &real_log, &real_prompt, &real_context)
        });
        r.record_in_a_row(warm_up, || record_row_db.step(&real_log, &real_prompt));
    }

    println!(
        "modix transition benchmark ({runs} runs of {per_run} transitions and of 2, \
         interleaved; medians)"
    );
    line("bare spawn (echo)", spawn.median());
    line(
        "modix's runner spawn (process group, caps)",
        runner.median(),
    );
    line("bare SQLite insert + commit (WAL, FULL)", commit.median());
    println!("trivial step (echo, 34 B answer, no prompt):");
    t.report(per_run);
    println!("realistic step (~4.5 KB prompt, ~11 KB context, ~3 KB output, {REAL_FILES} files):");
    r.report(per_run);

    // What reaches the disk: untimed runs, the WAL emptied before each.
    let disk_runs = 3;
    let fl = floor_disk(tmp.path(), disk_runs * LOOPS as usize, |c| {
        insert_trivial(c, ANSWER)
    });
    let warm = || {
        trivial.run("bench_once", "warm-up");
    };
    let trivial_disk = engine_disk(&trivial_root, disk_runs, warm, || {
        trivial.run("bench_loop", "benchmark");
    }) - engine_disk(&trivial_root, disk_runs, warm, || {
        trivial.run("bench_once", "benchmark");
    });
    let rfl = floor_disk(tmp.path(), disk_runs * LOOPS as usize, |c| {
        real_floor(c, &real_log, &real_prompt, &real_context)
    });
    let record_disk = record_floor_disk(
        tmp.path(),
        disk_runs * LOOPS as usize,
        &real_log,
        &real_prompt,
        &real_context,
    );
    let warm = || {
        real.run("real_once", "warm-up");
    };
    let real_disk = engine_disk(&real_root, disk_runs, warm, || {
        real.run("real_loop", REAL_EPIC);
    }) - engine_disk(&real_root, disk_runs, warm, || {
        real.run("real_once", REAL_EPIC);
    });
    let steps = (disk_runs * LOOPS as usize) as f64;
    println!(
        "on disk per step ({} extra steps; each run in a new database, WAL emptied before it):",
        steps
    );
    println!(
        "  {:<36}{:>14}{:>10}{:>12}",
        "", "WAL bytes", "commits", "stored"
    );
    let disk_line = |what: &str, d: Disk| {
        println!(
            "  {what:<36}{:>10.0} B {:>9.2} {:>10.0} B",
            d.wal_bytes as f64 / steps,
            d.commits as f64 / steps,
            d.stored_bytes as f64 / steps
        )
    };
    disk_line("trivial floor", fl);
    disk_line("modix, trivial step", trivial_disk);
    disk_line("realistic floor", rfl);
    disk_line("realistic floor writing modix's record", record_disk);
    disk_line("modix, realistic step", real_disk);

    startup(&trivial_root, tmp.path());
}

/// Timings of one kind of step: its floor, and the long and short runs.
#[derive(Default)]
struct Scenario {
    floor: Samples,
    long: Samples,
    once: Samples,
    /// Each long run's own step time (see [`Scenario::in_run`]).
    steady: Vec<Duration>,
    /// The same with `durability: pipelined`.
    pipelined: Vec<Duration>,
    /// The floor's step timed as a run's is ([`Scenario::floor_in_a_row`]).
    floor_row: Vec<Duration>,
    /// The floor writing modix's record ([`RecordFloor`]; realistic only),
    /// per step and in a row.
    record: Samples,
    record_row: Vec<Duration>,
}

impl Scenario {
    /// The long run just made, timed by its own record: the span from the
    /// commit of its first loop step to that of its last, per step. Each
    /// interval is one whole agent step (spawn, agent, scan, judge, commit)
    /// and nothing else: none of the start-up's variance (a worktree or a
    /// copy of the tree, 20–250 ms and noisy) that the difference of a long
    /// and a short run carries. Transition times are stored to the
    /// millisecond: ±2 ms over LOOPS steps, ±10 µs per step.
    fn in_run(&mut self, warm_up: bool, root: &Path) {
        if !warm_up {
            self.steady.push(in_run_step(root));
        }
    }

    /// [`Scenario::in_run`] of a project with `durability: pipelined`.
    fn in_run_pipelined(&mut self, warm_up: bool, root: &Path) {
        if !warm_up {
            self.pipelined.push(in_run_step(root));
        }
    }

    /// LOOPS floor steps in a row, timed as one span, per step: the floor
    /// as [`Scenario::in_run`] times the engine, with the log's checkpoints
    /// that its steps' commits ran (a span of LOOPS realistic floor steps
    /// holds one or two) and whatever else a long span meets.
    fn floor_in_a_row(&mut self, warm_up: bool, step: impl Fn()) {
        in_a_row(warm_up, &mut self.floor_row, step);
    }

    /// [`Scenario::floor_in_a_row`] of the floor writing modix's record.
    fn record_in_a_row(&mut self, warm_up: bool, step: impl Fn()) {
        in_a_row(warm_up, &mut self.record_row, step);
    }

    /// A CPU figure (`of` the samples) of the floor, and of one more step
    /// (the long run's less the short one's, per extra step).
    fn cpu_per_step(&mut self, of: fn(&mut Samples) -> Duration) -> (Duration, Duration) {
        let step = of(&mut self.long).saturating_sub(of(&mut self.once)) / LOOPS;
        (of(&mut self.floor), step)
    }

    fn report(&mut self, per_run: usize) {
        let (floor, long, once) = (self.floor.median(), self.long.median(), self.once.median());
        let amortised = long / per_run as u32;
        let per_step = long.saturating_sub(once) / LOOPS;
        let start_up = once.saturating_sub(per_step * 2);
        let ratio = |d: Duration| d.as_secs_f64() / floor.as_secs_f64();
        line("floor: spawn + parse JSON + insert + commit", floor);
        line("modix: one more agent step", per_step);
        line("modix: a run's start and end (workspace…)", start_up);
        line("modix: one transition, start-up amortised", amortised);
        println!(
            "    ratio per step / floor                    {:>9.2}×  (engine overhead {:+.1} µs per step)",
            ratio(per_step),
            us(per_step) - us(floor)
        );
        println!(
            "    ratio amortised / floor                   {:>9.2}×  (over {per_run} transitions)",
            ratio(amortised)
        );
        let steady = median(&mut self.steady);
        let row = median(&mut self.floor_row);
        line("modix: one agent step, timed in the run", steady);
        line("floor: one step, timed in a row of them", row);
        println!(
            "    ratio in-run step / floor's step median   {:>9.2}×  (from its recorded transition times)",
            ratio(steady)
        );
        println!(
            "    ratio in-run step / floor in a row        {:>9.2}×  (both spans, checkpoints included)",
            steady.as_secs_f64() / row.as_secs_f64()
        );
        if !self.record.wall.is_empty() {
            let (record, record_row) = (self.record.median(), median(&mut self.record_row));
            line("floor writing modix's record (its rows)", record);
            line("the same, timed in a row of them", record_row);
            println!(
                "    ratio record floor / floor                {:>9.2}×  (what the record's shape costs)",
                ratio(record)
            );
            println!(
                "    ratio in-run step / record floor in a row {:>9.2}×  (the engine beside its record)",
                steady.as_secs_f64() / record_row.as_secs_f64()
            );
        }
        let pipelined = median(&mut self.pipelined);
        line("modix, `durability: pipelined`: the same", pipelined);
        println!(
            "    ratio pipelined / floor's step median     {:>9.2}×  (the step's sync beside the next agent's start)",
            ratio(pipelined)
        );
        println!(
            "    ratio pipelined / floor in a row          {:>9.2}×",
            pipelined.as_secs_f64() / row.as_secs_f64()
        );
        let (floor_cpu, step_cpu) = self.cpu_per_step(Samples::cpu_median);
        println!(
            "    CPU per step (with the agent's): floor {:.1} µs, modix {:.1} µs: {:.2}×",
            us(floor_cpu),
            us(step_cpu),
            step_cpu.as_secs_f64() / floor_cpu.as_secs_f64()
        );
        let (floor_own, step_own) = self.cpu_per_step(Samples::own_median);
        println!(
            "    own CPU per step (the agent's left out): floor {:.1} µs, modix {:.1} µs (+{:.1} µs)",
            us(floor_own),
            us(step_own),
            us(step_own) - us(floor_own)
        );
        if !self.record.own.is_empty() {
            let record_own = self.record.own_median();
            println!(
                "    own CPU per step of the floor writing modix's record: {:.1} µs (modix {:+.1} µs)",
                us(record_own),
                us(step_own) - us(record_own)
            );
        }
    }
}

/// LOOPS steps in a row, timed as one span: each step's time, into `out`.
fn in_a_row(warm_up: bool, out: &mut Vec<Duration>, step: impl Fn()) {
    let t = Instant::now();
    for _ in 0..LOOPS {
        step();
    }
    if !warm_up {
        out.push(t.elapsed() / LOOPS);
    }
}

/// The latest long run of the project at `root`, timed by its own record
/// (see [`Scenario::in_run`]): its step's time.
fn in_run_step(root: &Path) -> Duration {
    // Read-only, as `modix history` reads: a read-write connection
    // closing last would checkpoint and delete the log modix keeps.
    let conn = Connection::open_with_flags(
        root.join(".modix/modix.db"),
        rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY,
    )
    .expect("open modix.db");
    let mut stmt = conn
        .prepare(
            "SELECT at FROM transitions WHERE run_id = \
             (SELECT id FROM runs ORDER BY created_at DESC, id DESC LIMIT 1) \
             ORDER BY seq DESC LIMIT ?1",
        )
        .expect("prepare");
    let at: Vec<jiff::Timestamp> = stmt
        .query_map([LOOPS + 1], |r| r.get::<_, String>(0))
        .expect("query")
        .map(|t| t.expect("row").parse().expect("a timestamp"))
        .collect();
    assert_eq!(at.len(), LOOPS as usize + 1);
    let span = at[0].duration_since(at[at.len() - 1]);
    Duration::try_from(span).expect("positive") / LOOPS
}

/// `durability: pipelined` in the project's `runtimes.json`.
fn pipelined(root: &Path) {
    std::fs::write(
        root.join(".modix/runtimes.json"),
        r#"{"durability": "pipelined"}"#,
    )
    .expect("runtimes.json");
}

fn line(what: &str, d: Duration) {
    println!("    {what:<44}{:>9.1} µs", us(d));
}

/// Timings of one measurement — wall time, and CPU time of this process and
/// of the children it waited for — with warm-up samples dropped. CPU time
/// barely moves with neighbour load, wall time does: the CPU figures tell
/// one version of modix from another on a busy machine.
#[derive(Default)]
struct Samples {
    wall: Vec<Duration>,
    cpu: Vec<Duration>,
    /// This process's own CPU time, without the children's: the engine's
    /// (or the floor's) own work, free of the agent's.
    own: Vec<Duration>,
}

impl Samples {
    fn time(&mut self, warm_up: bool, f: impl FnOnce()) {
        let (t, c, o) = (Instant::now(), cpu_time(), own_cpu_time());
        f();
        if !warm_up {
            self.wall.push(t.elapsed());
            self.cpu.push(cpu_time().saturating_sub(c));
            self.own.push(own_cpu_time().saturating_sub(o));
        }
    }

    fn own_median(&mut self) -> Duration {
        median(&mut self.own)
    }

    fn median(&mut self) -> Duration {
        median(&mut self.wall)
    }

    fn cpu_median(&mut self) -> Duration {
        median(&mut self.cpu)
    }
}

fn median(v: &mut [Duration]) -> Duration {
    v.sort_unstable();
    v[v.len() / 2]
}

/// User + system time of this process and its waited-for children.
fn cpu_time() -> Duration {
    usage(libc::RUSAGE_SELF) + usage(libc::RUSAGE_CHILDREN)
}

/// User + system time of this process alone.
fn own_cpu_time() -> Duration {
    usage(libc::RUSAGE_SELF)
}

fn usage(who: libc::c_int) -> Duration {
    // SAFETY: getrusage fills the struct it is given.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(who, &mut u) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(u.ru_utime) + tv(u.ru_stime)
}

fn echo_spec(echo: &Path, cwd: &Path) -> ProcessSpec {
    ProcessSpec {
        program: echo.to_path_buf(),
        args: vec![ANSWER.into()],
        cwd: cwd.to_path_buf(),
        env: agent_env().to_vec(),
        stdin: None,
        timeout: Duration::from_secs(10),
        idle_timeout: None,
        kill_grace: Duration::from_secs(1),
        capture: CaptureLimits::default(),
        echo: None,
        on_spawn: None,
        watch: None,
    }
}

/// What modix's agents inherit (its default `env.allow`, read as the engine
/// reads it), and nothing else.
/// The floor's commands get the same: inheriting the bench's own
/// environment, they would pay for what cargo adds to it (its
/// `LD_LIBRARY_PATH` sends the loader of every `echo` through four more
/// folders, ~0.1 ms a spawn here) and be a slower floor than the engine's.
fn agent_env() -> &'static [(OsString, OsString)] {
    static ENV: LazyLock<Vec<(OsString, OsString)>> = LazyLock::new(inherited_env);
    &ENV
}

/// `program` started as modix starts an agent: found on PATH once, before
/// the first step (as a run resolves its agents' commands before it
/// starts), with [`agent_env`] for its environment. Not by name with a
/// changed environment: std then forks the whole bench process instead of
/// spawning (`posix_spawn` cannot look the name up on the child's PATH),
/// ~0.7 ms more a step here, a floor slower than the engine's again.
fn agent_command(program: &'static LazyLock<PathBuf>) -> Command {
    let mut cmd = Command::new(&**program);
    cmd.env_clear()
        .envs(agent_env().iter().map(|(k, v)| (k, v)));
    cmd
}

static ECHO: LazyLock<PathBuf> = LazyLock::new(|| which::which("echo").expect("echo on PATH"));
static SH: LazyLock<PathBuf> = LazyLock::new(|| which::which("sh").expect("sh on PATH"));

fn us(d: Duration) -> f64 {
    d.as_secs_f64() * 1e6
}

// ---------------------------------------------------------------- the floor

fn open_floor_db(path: &Path) -> Connection {
    let conn = Connection::open(path).expect("open");
    conn.execute_batch(
        "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL;
         CREATE TABLE IF NOT EXISTS t (id INTEGER PRIMARY KEY, payload TEXT NOT NULL);
         CREATE TABLE IF NOT EXISTS r (id INTEGER PRIMARY KEY, prompt TEXT NOT NULL,
             context TEXT NOT NULL, output TEXT NOT NULL, parsed TEXT NOT NULL);",
    )
    .expect("schema");
    conn
}

fn insert_trivial(conn: &Connection, payload: &str) {
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    conn.execute("INSERT INTO t (payload) VALUES (?1)", [payload])
        .expect("insert");
    conn.execute_batch("COMMIT").expect("commit");
}

fn trivial_floor(conn: &Connection) {
    let out = agent_command(&ECHO)
        .arg(ANSWER)
        .stdin(Stdio::null())
        .output()
        .expect("spawn");
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json");
    insert_trivial(conn, &v.to_string());
}

/// The realistic agent's command, its prompt on stdin, its answer parsed,
/// and prompt, context, output and answer stored in one row.
fn real_floor(conn: &Connection, log: &str, prompt: &str, context: &str) {
    let out = real_agent(log, prompt);
    let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
    let stdout = String::from_utf8(out).expect("utf-8");
    conn.execute_batch("BEGIN IMMEDIATE").expect("begin");
    conn.execute(
        "INSERT INTO r (prompt, context, output, parsed) VALUES (?1, ?2, ?3, ?4)",
        [prompt, context, &stdout, &v.to_string()],
    )
    .expect("insert");
    conn.execute_batch("COMMIT").expect("commit");
}

/// The realistic agent run as the floors run it: its prompt on stdin, its
/// stdout read to the end.
fn real_agent(log: &str, prompt: &str) -> Vec<u8> {
    let mut child = agent_command(&SH)
        .args(["-c", REAL_SCRIPT, log])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    let mut stdin = child.stdin.take().expect("stdin");
    // The agent need not read its prompt (as in modix: EPIPE is no error).
    let _ = stdin.write_all(prompt.as_bytes());
    drop(stdin);
    child.wait_with_output().expect("wait").stdout
}

/// The realistic floor writing what a modix step records, with plain
/// SQLite (its own VFS, `synchronous=FULL`, foreign keys on) in a database
/// of modix's schema: the prompt and the output as blobs addressed by
/// their hash, an invocation row referring to them (its context's stable
/// part, command line and lifecycle stored once, as modix finds them in
/// its cache of known blobs; the context's step part inline), a
/// transition, the state's output message, and the run's row moved — one
/// transaction. Set beside the floor, it is what the record's shape costs;
/// set beside modix, what the engine costs on top of its record.
struct RecordFloor {
    conn: Connection,
    seq: std::cell::Cell<i64>,
    /// Blobs every step refers to: the context's stable part, the command
    /// line, the lifecycle, the change record.
    same: [i64; 4],
}

const RECORD_RUN: &str = "01KBENCH00000000000000000";

impl RecordFloor {
    fn open(path: &Path, context: &str) -> RecordFloor {
        modix::bench::create_store(path);
        let conn = Connection::open(path).expect("open");
        conn.execute_batch(
            "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
        )
        .expect("pragmas");
        let at = jiff::Timestamp::now().to_string();
        conn.execute(
            "INSERT INTO runs (id, epic, workflow_id, workflow_version, workflow_hash, status, \
             current_state, workdir, created_at, updated_at) \
             VALUES (?1, ?2, 'real_loop', '1.0.0', 'bench', 'running', 'WORK', '/tmp', ?3, ?3)",
            [RECORD_RUN, REAL_EPIC, &at],
        )
        .expect("run");
        let floor = RecordFloor {
            conn,
            seq: std::cell::Cell::new(0),
            same: [0; 4],
        };
        let same = [
            floor.put(context),
            floor.put(r#"["sh","-c","printf …"]"#),
            floor.put(r#"[["idle","start","running"],["running","exit","completed"]]"#),
            floor.put(r#"{"empty":true,"files":[],"write":false}"#),
        ];
        RecordFloor { same, ..floor }
    }

    /// Stores `text` once by its SHA-256, as modix's `blobs` does.
    fn put(&self, text: &str) -> i64 {
        use sha2::{Digest, Sha256};
        use std::fmt::Write as _;
        // Lowercase hex, as modix's: one string, not one per byte.
        let mut hash = String::with_capacity(64);
        for b in Sha256::digest(text.as_bytes()) {
            let _ = write!(hash, "{b:02x}");
        }
        let inserted = self
            .conn
            .prepare_cached(
                "INSERT INTO blobs (hash, size, text) VALUES (?1, ?2, ?3) \
                 ON CONFLICT (hash) DO NOTHING",
            )
            .and_then(|mut s| s.execute(rusqlite::params![hash, text.len() as i64, text]))
            .expect("blob");
        match inserted {
            1 => self.conn.last_insert_rowid(),
            _ => self
                .conn
                .query_row("SELECT id FROM blobs WHERE hash = ?1", [&hash], |r| {
                    r.get(0)
                })
                .expect("blob id"),
        }
    }

    /// One step: the realistic floor's agent, then its record.
    fn step(&self, log: &str, prompt: &str) {
        let started = jiff::Timestamp::now().to_string();
        let out = real_agent(log, prompt);
        let v: serde_json::Value = serde_json::from_slice(&out).expect("json");
        let stdout = String::from_utf8(out).expect("utf-8");
        let n = self.seq.get() + 1;
        self.seq.set(n);
        let at = jiff::Timestamp::now().to_string();
        let [context, argv, lifecycle, changes] = self.same;
        let c = &self.conn;
        c.execute_batch("BEGIN IMMEDIATE").expect("begin");
        // A prompt names its attempt: a new text at every step, as modix's.
        let prompt = self.put(&format!("{prompt}\nThis is attempt {n}."));
        let output = self.put(&stdout);
        // What modix's step part of the package holds (~0.9 KB, new at
        // every step, since store v17): the attempt, the step it came from
        // and the feedback's first line (the answer both quote is the
        // output's blob), the outputs by their blobs.
        let reason = format!(
            "tests passed: {}…",
            &v["summary"].as_str().expect("summary")[..300]
        );
        let feedback = format!("WORK sent the work back (again): {reason}");
        let context_now = serde_json::json!({
            "attempt": n, "next_task": null, "notes": [], "pending": [], "previous_result": null,
            "came_from": {"event": "again", "reason": reason, "seq": n, "state": "WORK"},
            "feedback": {"quoting_came_from_output": feedback},
            "outputs": {"PLAN": {"output_blob": argv, "schema": "task_spec", "seq": 1},
                        "WORK": {"output_blob": output, "schema": "test_result", "seq": n}},
        })
        .to_string();
        c.prepare_cached(
            "INSERT INTO invocations (run_id, n, state, agent, attempt, lifecycle_fsm, lifecycle, \
             argv, prompt, context, started_at, ended_at, status, outcome, exit_code, \
             duration_ms, stdout, stdout_bytes, parsed_output, changes_ref, context_now, \
             lifecycle_ref, argv_ref) \
             VALUES (?1, ?2, 'WORK', 'realist', ?2, 'agent_default', 'null', 'null', ?3, ?4, ?5, \
             ?6, 'completed', 'output', 0, 1, ?7, ?8, ?7, ?9, ?10, ?11, ?12)",
        )
        .and_then(|mut s| {
            s.execute(rusqlite::params![
                RECORD_RUN,
                n,
                prompt,
                context,
                started,
                at,
                output,
                stdout.len() as i64,
                changes,
                context_now,
                lifecycle,
                argv
            ])
        })
        .expect("invocation");
        let invocation = c.last_insert_rowid();
        c.prepare_cached(
            "INSERT INTO transitions (run_id, seq, at, from_state, event, to_state, attempt, \
             bound, agent, invocation_id) \
             VALUES (?1, ?2, ?3, 'WORK', 'again', 'WORK', ?2, 1000, 'realist', ?4)",
        )
        .and_then(|mut s| s.execute(rusqlite::params![RECORD_RUN, n, at, invocation]))
        .expect("transition");
        c.prepare_cached(
            "INSERT INTO messages (run_id, seq, kind, state, payload, at) \
             VALUES (?1, ?2, 'test_result', 'WORK', ?3, ?4)",
        )
        .and_then(|mut s| s.execute(rusqlite::params![RECORD_RUN, n, output, at]))
        .expect("message");
        c.prepare_cached("UPDATE runs SET current_state = 'WORK', updated_at = ?2 WHERE id = ?1")
            .and_then(|mut s| s.execute([RECORD_RUN, &at]))
            .expect("run moved");
        c.execute_batch("COMMIT").expect("commit");
    }
}

// ------------------------------------------------------------- disk figures

/// What some runs left on disk: WAL bytes and commit frames written, and
/// database bytes in use once checkpointed.
#[derive(Debug, Clone, Copy, Default)]
struct Disk {
    wal_bytes: u64,
    commits: u64,
    stored_bytes: i64,
}

impl std::ops::Sub for Disk {
    type Output = Disk;
    fn sub(self, o: Disk) -> Disk {
        Disk {
            wal_bytes: self.wal_bytes.saturating_sub(o.wal_bytes),
            commits: self.commits.saturating_sub(o.commits),
            stored_bytes: self.stored_bytes - o.stored_bytes,
        }
    }
}

/// `runs` runs of `run`, each in a new database (made by `warm`) and on an
/// emptied WAL, summed. A read transaction
/// of ours stays open meanwhile, so no checkpoint (modix's automatic ones,
/// or its closing connection's) copies or restarts the WAL before it is read.
fn engine_disk(root: &Path, runs: usize, warm: impl Fn(), run: impl Fn()) -> Disk {
    let db = root.join(".modix/modix.db");
    let mut total = Disk::default();
    for _ in 0..runs {
        // Each run in a database of its own, made by a short warm-up run:
        // runs of the same workflow repeat each other's texts exactly, and
        // the content-addressed store would count what a second identical
        // run stores as nothing, which no real run (whose agents answer
        // differently) sees.
        for ext in ["db", "db-wal", "db-shm"] {
            let _ = std::fs::remove_file(db.with_extension(ext));
        }
        warm();
        let conn = Connection::open(&db).expect("open modix.db");
        let before = used_bytes(&conn);
        conn.execute_batch("BEGIN").expect("begin");
        conn.query_row("SELECT count(*) FROM sqlite_schema", [], |_| Ok(()))
            .expect("read snapshot");
        // What the run wrote: the log, held by our snapshot, only grows
        // meanwhile (it starts with what the warm-up's close left).
        let (frames_before, commits_before) = wal_frames(&db.with_extension("db-wal"));
        run();
        let (frames, commits) = wal_frames(&db.with_extension("db-wal"));
        let (frames, commits) = (frames - frames_before, commits - commits_before);
        conn.execute_batch("COMMIT").expect("end snapshot");
        let after = used_bytes(&conn);
        total.wal_bytes += frames * (4096 + 24);
        total.commits += commits;
        total.stored_bytes += after - before;
    }
    total
}

/// The floor's figures for `n` steps of `step`, in a database of its own.
fn floor_disk(dir: &Path, n: usize, step: impl Fn(&Connection)) -> Disk {
    static COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = COUNT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let path = dir.join(format!("floor-disk-{k}.db"));
    let conn = open_floor_db(&path);
    disk_of(&conn, &path, || {
        for _ in 0..n {
            step(&conn);
        }
    })
}

/// [`floor_disk`] of the floor writing modix's record.
fn record_floor_disk(dir: &Path, n: usize, log: &str, prompt: &str, context: &str) -> Disk {
    let path = dir.join("floor-record-disk.db");
    let floor = RecordFloor::open(&path, context);
    disk_of(&floor.conn, &path, || {
        for _ in 0..n {
            floor.step(log, prompt);
        }
    })
}

/// What `steps` left on disk through `conn`, the database at `path`, its
/// WAL emptied before them and never checkpointed meanwhile.
fn disk_of(conn: &Connection, path: &Path, steps: impl FnOnce()) -> Disk {
    conn.pragma_update(None, "wal_autocheckpoint", 0)
        .expect("no autocheckpoint");
    let before = used_bytes(conn);
    steps();
    let (frames, commits) = wal_frames(&path.with_extension("db-wal"));
    let after = used_bytes(conn);
    Disk {
        wal_bytes: frames * (4096 + 24),
        commits,
        stored_bytes: after - before,
    }
}

/// Database bytes in use after the WAL is copied back and emptied.
fn used_bytes(conn: &Connection) -> i64 {
    conn.query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |r| {
        let busy: i64 = r.get(0)?;
        assert_eq!(busy, 0, "checkpoint blocked");
        Ok(())
    })
    .expect("checkpoint");
    let pages: i64 = conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .expect("page_count");
    let free: i64 = conn
        .query_row("PRAGMA freelist_count", [], |r| r.get(0))
        .expect("freelist_count");
    let size: i64 = conn
        .query_row("PRAGMA page_size", [], |r| r.get(0))
        .expect("page_size");
    (pages - free) * size
}

/// Valid frames in a WAL file, and how many of them end a transaction
/// (a commit frame records the database size; others record 0).
fn wal_frames(path: &Path) -> (u64, u64) {
    let Ok(bytes) = std::fs::read(path) else {
        return (0, 0);
    };
    if bytes.len() < 32 {
        return (0, 0);
    }
    let be = |b: &[u8]| u32::from_be_bytes([b[0], b[1], b[2], b[3]]);
    let page = be(&bytes[8..12]) as usize;
    let salt = (be(&bytes[16..20]), be(&bytes[20..24]));
    let (mut frames, mut commits) = (0, 0);
    let mut at = 32;
    while at + 24 + page <= bytes.len() {
        let h = &bytes[at..at + 24];
        if (be(&h[8..12]), be(&h[12..16])) != salt {
            break;
        }
        frames += 1;
        if be(&h[4..8]) != 0 {
            commits += 1;
        }
        at += 24 + page;
    }
    (frames, commits)
}

// ----------------------------------------------------------------- start-up

/// `modix validate` from process start to a validated project (the binary's
/// own start-up and the project's load and checks), beside a bare spawn: of
/// the trivial project, and of one `modix init` made, whose presets and
/// templates bring the regexes and templates a trivial project lacks.
fn startup(root: &Path, dir: &Path) {
    let bin = env!("CARGO_BIN_EXE_modix");
    let home = dir.join("home");
    let scaffolded = dir.join("scaffolded");
    std::fs::create_dir_all(&scaffolded).expect("mkdir");
    let out = Command::new(bin)
        .args(["init", "--project"])
        .arg(&scaffolded)
        .env("MODIX_HOME", &home)
        .output()
        .expect("modix init");
    assert!(out.status.success(), "{out:?}");
    let validate_in = |project: &Path| {
        let out = from_a_shell(bin)
            .args(["validate", "-q", "--project"])
            .arg(project)
            .env("MODIX_HOME", &home)
            .output()
            .expect("modix validate");
        assert!(out.status.success(), "{out:?}");
    };
    let mut trivial = Samples::default();
    let mut init = Samples::default();
    let mut bare = Samples::default();
    for i in 0..=30 {
        let warm_up = i == 0;
        trivial.time(warm_up, || validate_in(root));
        init.time(warm_up, || validate_in(&scaffolded));
        bare.time(warm_up, || {
            from_a_shell("true").output().expect("true");
        });
    }
    println!("start-up (spawned, medians of 30):");
    line("`modix validate`, trivial project", trivial.median());
    line("`modix validate`, `modix init`-ed", init.median());
    line("bare spawn (true)", bare.median());
}

/// `program` as a user's shell would start it: without the
/// `LD_LIBRARY_PATH` cargo adds to the bench's environment (see
/// [`agent_env`]).
fn from_a_shell(program: &str) -> Command {
    let mut cmd = Command::new(program);
    cmd.env_remove("LD_LIBRARY_PATH");
    cmd
}

// ------------------------------------------------------------------ projects

fn write_trivial_project(root: &Path) {
    let agents = format!(
        r#"{{"agents": {{"worker": {{"role": "worker", "command": ["echo", {}],
            "manifest": {{"output_schema": "test_result"}}}}}}}}"#,
        serde_json::to_string(ANSWER).expect("json")
    );
    let mut files = common_files("bench", "bench_loop", agents);
    files.push((
        ".modix/fsm/bench_loop.toml",
        loop_workflow("bench_loop", "worker", Some(LOOPS), "WORK", ""),
    ));
    files.push((
        ".modix/fsm/bench_once.toml",
        loop_workflow("bench_once", "worker", None, "WORK", ""),
    ));
    write_files(root, &files);
}

const REAL_EPIC: &str = "Add rate limiting to the public HTTP API: a token bucket per API key, \
     configurable per route, with 429 responses that carry Retry-After, metrics for rejected \
     requests, and documentation of the new settings.";

/// The realistic project: a planner (`cat` of a ~1.5 KB task spec) and the
/// realistic agent, a prompt template, and a tree of REAL_FILES files.
/// Returns the agent's ~3 KB log argument.
fn write_real_project(root: &Path) -> String {
    let log = words(2900);
    let spec_path = root.join("task_spec.json");
    let agents = serde_json::json!({
        "agents": {
            "planner": {
                "role": "planner",
                "command": ["cat", spec_path],
                "manifest": {"output_schema": "task_spec"}
            },
            "realist": {
                "role": "tester",
                "command": ["sh", "-c", REAL_SCRIPT, log],
                "manifest": {"output_schema": "test_result", "prompt": "prompts/real.md"}
            }
        }
    });
    let plan = r#"
[states.PLAN]
kind = "agent"
agent = "planner"
output = "task_spec"
emit = [
  { on = "output", event = "planned" },
  { on = "invalid_output", event = "failed" },
  { on = "process_error", event = "failed" },
  { on = "timeout", event = "failed" },
]

[states.FAILED]
kind = "terminal"
outcome = "failure"

[[transitions]]
from = "PLAN"
event = "planned"
to = "WORK"

[[transitions]]
from = "PLAN"
event = "failed"
to = "FAILED"
"#;
    let mut files = common_files("bench-real", "real_loop", agents.to_string());
    files.push((
        ".modix/fsm/real_loop.toml",
        loop_workflow("real_loop", "realist", Some(LOOPS), "PLAN", plan),
    ));
    files.push((
        ".modix/fsm/real_once.toml",
        loop_workflow("real_once", "realist", None, "PLAN", plan),
    ));
    files.push((".modix/prompts/real.md", real_template()));
    files.push(("task_spec.json", task_spec().to_string()));
    let tree: Vec<(String, String)> = (0..REAL_FILES)
        .map(|i| {
            (
                format!("src/m{:02}/f{i:03}.rs", i / 15),
                format!("// file {i}\npub fn f{i}() -> u32 {{ {i} }}\n"),
            )
        })
        .collect();
    for (name, text) in &tree {
        write_files(root, &[(name.as_str(), text.clone())]);
    }
    write_files(root, &files);
    log
}

fn task_spec() -> serde_json::Value {
    let task = |i: usize| {
        serde_json::json!({
            "id": format!("T{i}"),
            "title": format!("Part {i} of the rate limiter"),
            "description": words(180),
            "files": [format!("src/m{i:02}/f{:03}.rs", i * 15), "src/m00/f000.rs"],
            "acceptance": ["cargo test passes", "the new setting is documented"]
        })
    };
    serde_json::json!({
        "title": "Rate limiting for the public API",
        "summary": words(200),
        "tasks": (1..=4).map(task).collect::<Vec<_>>(),
        "complexity": "medium"
    })
}

/// ~2.5 KB of instructions around the epic, attempt and task spec.
fn real_template() -> String {
    format!(
        "You are the {{{{ role }}}} of project {{{{ project.name }}}} ({{{{ project.description }}}}).\n\
         This is attempt {{{{ attempt }}}} of state {{{{ state }}}} in run {{{{ run_id }}}}.\n\n\
         ## Epic\n{{{{ epic }}}}\n\n## The plan\n{{{{ task_spec | tojson }}}}\n\n\
         ## How to work\n{}\n\n## Your answer\nAnswer with one JSON object satisfying the \
         schema in {{{{ output_schema_path }}}}.\n",
        words(2200)
    )
}

/// The prompt and context the realistic floor stores: the same sizes as the
/// engine's.
fn real_prompt_sample(root: &Path) -> String {
    let t = real_template();
    t.replace("{{ task_spec | tojson }}", &task_spec().to_string())
        .replace("{{ epic }}", REAL_EPIC)
        .replace("{{ output_schema_path }}", &root.display().to_string())
}

/// The package a loop step of the realistic agent is handed (~11 KB): the
/// first visit's (~2.5 KB) and the previous answer, in `feedback` (the
/// state sent the work back) and among the `outputs` with the task spec.
fn real_context_sample(root: &Path, log: &str) -> String {
    let answer = serde_json::json!({
        "passed": true, "failures": [], "summary": format!("pid 4242. {log}")
    });
    let reason = format!(
        "tests passed: {}…",
        &answer["summary"].as_str().unwrap()[..380]
    );
    let feedback = format!(
        "WORK sent the work back (again): {reason}\n{}",
        serde_json::to_string_pretty(&answer).unwrap()
    );
    serde_json::json!({
        "agent": "realist", "attempt": 41, "bound": LOOPS + 1, "context_mode": "isolated",
        "epic": REAL_EPIC, "feedback": feedback, "output_schema": "test_result",
        "output_schema_path": root.join(".modix/runs/x/schemas/test_result.schema.json"),
        "previous_result": null, "role": "tester", "run_id": "01K0000000000000000000000",
        "state": "WORK", "task_spec": task_spec(), "workdir": root, "workflow": "real_loop",
        "came_from": {"event": "again", "reason": reason, "seq": 42, "state": "WORK"},
        "outputs": {
            "PLAN": {"seq": 1, "output": task_spec()},
            "WORK": {"seq": 42, "output": answer},
        },
        "project": {"name": "bench-real", "description": "A benchmark project.",
                    "stack": [], "conventions": [], "commands": {}}
    })
    .to_string()
}

/// About `n` bytes of plain words (no quotes, backslashes or newlines).
fn words(n: usize) -> String {
    const W: [&str; 12] = [
        "the",
        "limiter",
        "checks",
        "each",
        "request",
        "against",
        "its",
        "bucket",
        "and",
        "records",
        "rejections",
        "promptly",
    ];
    let mut s = String::with_capacity(n + 16);
    let mut i = 0;
    while s.len() < n {
        s.push_str(W[i % W.len()]);
        s.push(if i % 17 == 16 { '.' } else { ' ' });
        i += 1;
    }
    s
}
