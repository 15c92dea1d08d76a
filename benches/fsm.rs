//! Load + compile + check (worst case included) of the shipped workflow and of
//! a generated 1,000-state machine. Targets: well under 1 ms and under 10 ms.

use modix::bench::{chain_machine, compile, fire_from_start, parse_only};

fn main() {
    divan::main();
}

const SHIPPED: &str = include_str!("../fsm/plan_execute_test.toml");

#[divan::bench]
fn shipped_plan_execute_test() {
    assert!(compile(divan::black_box(SHIPPED)));
}

#[divan::bench(args = [100, 1000])]
fn generated_chain(bencher: divan::Bencher, n: usize) {
    let text = chain_machine(n);
    bencher.bench(|| assert!(compile(divan::black_box(&text))));
}

#[divan::bench]
fn fire_one_step(bencher: divan::Bencher) {
    let fire = fire_from_start(SHIPPED, "epic_received");
    bencher.bench(fire);
}

/// The TOML parser's own document tree (spans kept), without serde.
#[divan::bench(args = [1000])]
fn toml_detable_only(bencher: divan::Bencher, n: usize) {
    let text = chain_machine(n);
    bencher.bench(|| toml::de::DeTable::parse(divan::black_box(&text)).is_ok());
}

/// modix's parse step (TOML text to the raw file, spans kept).
#[divan::bench(args = [1000])]
fn spec_parse_only(bencher: divan::Bencher, n: usize) {
    let text = chain_machine(n);
    bencher.bench(|| parse_only(divan::black_box(&text)));
}
