//! Load + compile + check (worst case included) of the shipped workflow and of
//! a generated 1,000-state machine. Targets: well under 1 ms and under 10 ms.

use modix::fsm::{CompileOptions, bench_support, compile_str};

fn main() {
    divan::main();
}

const SHIPPED: &str = include_str!("../fsm/plan_execute_test.toml");

#[divan::bench]
fn shipped_plan_execute_test() {
    let (m, _) = compile_str(
        divan::black_box(SHIPPED),
        "plan_execute_test.toml",
        &CompileOptions::default(),
    );
    assert!(m.is_some());
}

#[divan::bench(args = [100, 1000])]
fn generated_chain(bencher: divan::Bencher, n: usize) {
    let text = bench_support::chain_machine(n);
    bencher.bench(|| {
        let (m, _) = compile_str(
            divan::black_box(&text),
            "chain.toml",
            &CompileOptions::default(),
        );
        assert!(m.is_some());
    });
}

#[divan::bench]
fn fire_one_step(bencher: divan::Bencher) {
    let (m, _) = compile_str(
        SHIPPED,
        "plan_execute_test.toml",
        &CompileOptions::default(),
    );
    let Some(m) = m else { return };
    let pos = m.start();
    bencher.bench(|| m.fire(divan::black_box(&pos), divan::black_box("epic_received")));
}

/// The TOML parser's own document tree (spans kept), without serde.
#[divan::bench(args = [1000])]
fn toml_detable_only(bencher: divan::Bencher, n: usize) {
    let text = bench_support::chain_machine(n);
    bencher.bench(|| toml::de::DeTable::parse(divan::black_box(&text)).is_ok());
}

/// modix's parse step (TOML text to the raw file, spans kept).
#[divan::bench(args = [1000])]
fn spec_parse_only(bencher: divan::Bencher, n: usize) {
    let text = bench_support::chain_machine(n);
    bencher.bench(|| bench_support::parse_only(divan::black_box(&text)));
}
