//! Throughput of many `modix go` at once on one project (one store), beside
//! one run alone.
//!
//! Real agents spend most of a step waiting (for a model, for a test suite),
//! so concurrent runs should overlap almost perfectly: the store, the
//! workspaces and modix's own start-up are the only things they share. This
//! spawns the real binary on a project whose command agent sleeps, times one
//! run alone, then CONCURRENCY runs started together on the same project,
//! and reports throughput (agent steps completed per second of wall time) as
//! a ratio; the goal is ≥ 20× with 32 runs. Every lock problem counts as an
//! error: a non-zero exit, a stderr that mentions a locked or busy database,
//! or, checked in the database afterwards, a run that did not reach DONE with
//! every transition recorded (seq 1..n, none missing) — and the database must
//! pass `PRAGMA integrity_check`.
//!
//! Two projects, in the same rounds so neighbour load hits both alike: a git
//! repository (the default workspace is then a git worktree per run, what
//! users get) and a plain folder (the default is then a copy per run).
//!
//! Run: `cargo bench --bench concurrent`. Environment: MODIX_BENCH_RUNS
//! (rounds, default 3), MODIX_BENCH_CONCURRENCY (default 32),
//! MODIX_BENCH_STEPS (agent steps per run, default 20), MODIX_BENCH_SLEEP
//! (the agent's wait in seconds, default 0.2), MODIX_BENCH_KEEP=1 (keep the
//! projects and their stores afterwards, for a look at the timings).

use std::collections::HashSet;
use std::io::Read as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rusqlite::Connection;

mod support;

fn main() {
    let cfg = Config::from_env();
    let tmp = tempfile::tempdir().expect("tempdir");
    let git_root = tmp.path().join("git-project");
    write_project(&git_root, &cfg);
    make_git_repo(&git_root);
    let copy_root = tmp.path().join("plain-project");
    write_project(&copy_root, &cfg);
    let projects = [
        Bench::new("git worktree", git_root, tmp.path()),
        Bench::new("copy", copy_root, tmp.path()),
    ];
    println!(
        "modix concurrency benchmark: {} rounds; each round one run alone, then {} runs at \
         once on the same store; {} agent steps per run, the agent sleeping {} s",
        cfg.rounds, cfg.concurrency, cfg.steps, cfg.sleep
    );
    // Warm-up: page cache, the binary, the store's creation and migration.
    for p in &projects {
        p.batch(&cfg, 1).expect_clean(p.name);
    }
    let mut results: Vec<Vec<Round>> = projects.iter().map(|_| Vec::new()).collect();
    for round in 1..=cfg.rounds {
        for (p, rounds) in projects.iter().zip(&mut results) {
            let alone = p.batch(&cfg, 1);
            let many = p.batch(&cfg, cfg.concurrency);
            let r = Round { alone, many };
            r.print(round, p.name, cfg.concurrency);
            rounds.push(r);
        }
    }
    println!("medians:");
    for (p, rounds) in projects.iter().zip(&mut results) {
        summary(p.name, rounds, &cfg);
        p.check_integrity();
    }
    if std::env::var_os("MODIX_BENCH_KEEP").is_some_and(|v| v == "1") {
        println!("kept: {}", tmp.keep().display());
    }
}

/// What the environment asks for.
struct Config {
    rounds: usize,
    concurrency: usize,
    steps: u32,
    sleep: f64,
}

impl Config {
    fn from_env() -> Config {
        fn var<T: std::str::FromStr>(name: &str, default: T) -> T {
            std::env::var(name)
                .ok()
                .and_then(|v| v.parse().ok())
                .unwrap_or(default)
        }
        let cfg = Config {
            rounds: var("MODIX_BENCH_RUNS", 3),
            concurrency: var("MODIX_BENCH_CONCURRENCY", 32),
            steps: var("MODIX_BENCH_STEPS", 20),
            sleep: var("MODIX_BENCH_SLEEP", 0.2),
        };
        assert!(cfg.rounds >= 1 && cfg.concurrency >= 1 && cfg.steps >= 1);
        cfg
    }

    /// Transitions of a complete run: INIT -go-> WORK, `steps - 1` loops,
    /// then the loop's bound exhausted -> DONE.
    fn transitions(&self) -> u32 {
        self.steps + 1
    }
}

/// One project and the isolated environment its runs get.
struct Bench {
    name: &'static str,
    root: PathBuf,
    home: PathBuf,
    modix_home: PathBuf,
}

impl Bench {
    fn new(name: &'static str, root: PathBuf, tmp: &Path) -> Bench {
        let key = root.file_name().expect("name").to_owned();
        let home = tmp.join("home").join(&key);
        let modix_home = tmp.join("modix-home").join(&key);
        for d in [&home, &modix_home] {
            std::fs::create_dir_all(d).expect("mkdir");
        }
        Bench {
            name,
            root,
            home,
            modix_home,
        }
    }

    fn db(&self) -> PathBuf {
        self.root.join(".modix/modix.db")
    }

    fn spawn(&self) -> Child {
        Command::new(env!("CARGO_BIN_EXE_modix"))
            .args(["-q", "go", "benchmark"])
            .current_dir(&self.root)
            .env("HOME", &self.home)
            .env("MODIX_HOME", &self.modix_home)
            .env("MODIX_SKIP_READINESS", "1")
            .env("NO_COLOR", "1")
            .env_remove("MODIX_PROJECT")
            .env_remove("MODIX_LOG")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn modix")
    }

    /// `n` runs started together; timed from the first spawn to the last
    /// exit, then checked in the store.
    fn batch(&self, cfg: &Config, n: usize) -> Batch {
        let before = run_ids(&self.db());
        let start = Instant::now();
        let children: Vec<Child> = (0..n).map(|_| self.spawn()).collect();
        // Each child's stderr is drained by its own thread, so a chatty run
        // can never block on a full pipe while we wait for another.
        let waiters: Vec<_> = children
            .into_iter()
            .map(|mut child| {
                std::thread::spawn(move || {
                    let mut err = String::new();
                    let mut pipe = child.stderr.take().expect("stderr");
                    pipe.read_to_string(&mut err).expect("read stderr");
                    (child.wait().expect("wait"), err)
                })
            })
            .collect();
        let mut batch = Batch::default();
        for w in waiters {
            let (status, err) = w.join().expect("waiter");
            let lower = err.to_lowercase();
            if !status.success() || lower.contains("locked") || lower.contains("busy") {
                batch.errors += 1;
                batch.messages.push(format!("{status}: {}", err.trim()));
            }
        }
        batch.wall = start.elapsed();
        let after = run_ids(&self.db());
        let new: Vec<String> = after.difference(&before).cloned().collect();
        batch.runs = new.len();
        batch.steps = n as u64 * u64::from(cfg.steps);
        if new.len() != n {
            batch.errors += n.abs_diff(new.len());
            batch
                .messages
                .push(format!("{n} runs started, {} recorded", new.len()));
        }
        for id in &new {
            if let Err(problem) = check_run(&self.db(), id, cfg.transitions()) {
                batch.errors += 1;
                batch.messages.push(problem);
            }
        }
        batch
    }

    fn check_integrity(&self) {
        let conn = Connection::open(self.db()).expect("open db");
        let verdict: String = conn
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .expect("integrity_check");
        println!("  {:<14} PRAGMA integrity_check: {verdict}", self.name);
        assert_eq!(verdict, "ok", "{}: the store is damaged", self.name);
    }
}

/// One timed group of runs.
#[derive(Default)]
struct Batch {
    wall: Duration,
    /// Agent steps of the runs that were asked for.
    steps: u64,
    runs: usize,
    /// Lock errors and incomplete runs, with what each said.
    errors: usize,
    messages: Vec<String>,
}

impl Batch {
    fn throughput(&self) -> f64 {
        self.steps as f64 / self.wall.as_secs_f64()
    }

    fn expect_clean(&self, name: &str) {
        assert_eq!(self.errors, 0, "{name}: {:#?}", self.messages);
    }
}

struct Round {
    alone: Batch,
    many: Batch,
}

impl Round {
    fn ratio(&self) -> f64 {
        self.many.throughput() / self.alone.throughput()
    }

    fn print(&self, round: usize, name: &str, n: usize) {
        println!(
            "  round {round} {name:<14} 1 run {:>6.2} s ({:>5.1} steps/s) | {n} runs {:>6.2} s \
             ({:>6.1} steps/s) | ratio {:>5.1}× | errors {}",
            self.alone.wall.as_secs_f64(),
            self.alone.throughput(),
            self.many.wall.as_secs_f64(),
            self.many.throughput(),
            self.ratio(),
            self.alone.errors + self.many.errors,
        );
        for m in self
            .alone
            .messages
            .iter()
            .chain(&self.many.messages)
            .take(5)
        {
            println!("      {m}");
        }
    }
}

fn summary(name: &str, rounds: &[Round], cfg: &Config) {
    let med = |f: &dyn Fn(&Round) -> f64| {
        let mut v: Vec<f64> = rounds.iter().map(f).collect();
        v.sort_by(f64::total_cmp);
        v[v.len() / 2]
    };
    let errors: usize = rounds.iter().map(|r| r.alone.errors + r.many.errors).sum();
    let ratio = med(&|r| r.ratio());
    let ideal = cfg.steps as f64 * cfg.sleep;
    println!(
        "  {name:<14} 1 run {:.2} s ({:.1} steps/s; the agents' sleep alone is {ideal:.1} s) | \
         {} runs {:.2} s ({:.1} steps/s) | ratio {ratio:.1}× (target ≥ 20×: {}) | lock errors \
         and incomplete runs {errors} (of {} runs)",
        med(&|r| r.alone.wall.as_secs_f64()),
        med(&|r| r.alone.throughput()),
        cfg.concurrency,
        med(&|r| r.many.wall.as_secs_f64()),
        med(&|r| r.many.throughput()),
        if ratio >= 20.0 { "met" } else { "MISSED" },
        rounds
            .iter()
            .map(|r| r.alone.runs + r.many.runs)
            .sum::<usize>(),
    );
}

/// Ids of the runs the store holds (none before it exists).
fn run_ids(db: &Path) -> HashSet<String> {
    if !db.exists() {
        return HashSet::new();
    }
    let conn = Connection::open(db).expect("open db");
    let mut stmt = conn.prepare("SELECT id FROM runs").expect("prepare");
    stmt.query_map([], |r| r.get(0))
        .expect("query")
        .collect::<Result<_, _>>()
        .expect("rows")
}

/// The run succeeded in DONE with transitions seq 1..=expected, none missing.
fn check_run(db: &Path, id: &str, expected: u32) -> Result<(), String> {
    let conn = Connection::open(db).expect("open db");
    let (status, state): (String, String) = conn
        .query_row(
            "SELECT status, current_state FROM runs WHERE id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("run row");
    let (count, min, max): (u32, Option<u32>, Option<u32>) = conn
        .query_row(
            "SELECT count(*), min(seq), max(seq) FROM transitions WHERE run_id = ?1",
            [id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .expect("transitions");
    let last_to: Option<String> = conn
        .query_row(
            "SELECT to_state FROM transitions WHERE run_id = ?1 ORDER BY seq DESC LIMIT 1",
            [id],
            |r| r.get(0),
        )
        .ok();
    let contiguous = count == expected && min == Some(1) && max == Some(expected);
    if status == "succeeded" && state == "DONE" && contiguous && last_to.as_deref() == Some("DONE")
    {
        Ok(())
    } else {
        Err(format!(
            "run {id}: {status} in {state}, {count} transitions (seq {min:?}..{max:?}, \
             {expected} expected)"
        ))
    }
}

/// A project whose command agent sleeps, then passes; run in a loop bounded
/// so that a run makes `steps` agent steps.
fn write_project(root: &Path, cfg: &Config) {
    let script = format!(
        r#"sleep {}; echo '{{"passed": true, "summary": "ok"}}'"#,
        cfg.sleep
    );
    let command = serde_json::json!(["sh", "-c", script]);
    support::loop_project(root, "sleepy_loop", command, cfg.steps - 1);
}

/// `git init` and one commit of everything, with no user configuration.
fn make_git_repo(root: &Path) {
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args([
                "-c",
                "user.name=Bench",
                "-c",
                "user.email=bench@example.com",
            ])
            .args([
                "-c",
                "init.defaultBranch=main",
                "-c",
                "commit.gpgsign=false",
            ])
            .args(args)
            .current_dir(root)
            .env("GIT_CONFIG_GLOBAL", "/dev/null")
            .env("GIT_CONFIG_NOSYSTEM", "1")
            .output()
            .expect("git");
        assert!(
            out.status.success(),
            "git {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    git(&["init", "-q"]);
    git(&["add", "-A"]);
    git(&["commit", "-q", "-m", "base"]);
}
