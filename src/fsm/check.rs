//! The static checks, and the compile step they guard: a [`RawFile`] becomes a
//! [`Machine`] only when no check reports an error.
//!
//! Field checks and references are in this file; the graph checks
//! (determinism, reachability, completeness, termination) are in `graph_checks`.

use foldhash::HashMap;
use foldhash::HashMapExt as _;
use std::ops::Range;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use sha2::{Digest, Sha256};
use toml::Spanned;

use super::CompileOptions;
use super::bounds;
use super::emit::{AgentState, Condition, EmitRule, Outcome};
use super::failure::CATCH_PREFIX;
use super::gates;
use super::graph_checks::{self, Dropped, Partial};
use super::machine::{Edge, Ending, Machine, Source, State, StateId, StateKind, Transition};
use super::recovery;
use super::spec::{RawFile, RawState, Text};
use crate::diagnostics::{Diagnostic, Diagnostics, LineIndex, unknown_name_help};

/// Where diagnostics go, with the text they point into.
pub(crate) struct Ctx<'a> {
    pub text: &'a str,
    /// `text` again, shared rather than copied into the machine.
    pub shared: Arc<str>,
    pub file: &'a str,
    pub diags: &'a mut Diagnostics,
    /// Line starts of `text`, built on the first diagnostic: finding a
    /// span's line by rescanning the text per diagnostic is quadratic on a
    /// file with thousands of problems.
    pub lines: std::cell::OnceCell<crate::diagnostics::LineIndex<'a>>,
}

impl Ctx<'_> {
    pub fn error(&mut self, code: &str, span: Range<usize>, msg: String, help: String) {
        let lines = self.lines.get_or_init(|| LineIndex::new(self.text));
        let d = Diagnostic::error(code, self.file, msg)
            .with_span_in(lines, span)
            .with_help(help);
        self.diags.push(d);
    }

    pub fn warning(&mut self, code: &str, span: Range<usize>, msg: String, help: String) {
        let lines = self.lines.get_or_init(|| LineIndex::new(self.text));
        let d = Diagnostic::warning(code, self.file, msg)
            .with_span_in(lines, span)
            .with_help(help);
        self.diags.push(d);
    }
}

/// Checks `raw` and builds the machine if nothing is wrong.
pub(crate) fn compile(
    raw: RawFile,
    cx: &mut Ctx,
    source: Source,
    opts: &CompileOptions,
) -> Option<Machine> {
    let errors_before = cx.diags.error_count();
    let id = header_id(&raw, cx);
    let version = header_version(&raw, cx);
    let (states, incomplete) = states(&raw, opts, cx);
    let names: Vec<&str> = states.iter().map(|s| s.name.as_str()).collect();
    let lookup: HashMap<&str, StateId> = names
        .iter()
        .enumerate()
        .map(|(i, n)| (*n, StateId(i as u32)))
        .collect();
    let initial = initial(&raw, &lookup, &names, cx);
    if let Some(initial) = initial {
        gates::inputs_only_first(&states, initial, cx);
    }
    let (mut transitions, mut partial) = transitions(&raw, &states, &lookup, &names, opts, cx);
    // After the file's own transitions, so a run's record and `fsm show`
    // list those first; none is bounded, so the counters keep their slots.
    recovery::catch_transitions(&states, &lookup, &names, &mut transitions, &mut partial, cx);

    let (outgoing, graph) = graph_of(states.len(), &transitions);
    let g = graph_checks::Graph {
        states: &states,
        transitions: &transitions,
        outgoing: &outgoing,
        graph: &graph,
        raw: &raw,
        incomplete: &incomplete,
        partial: &partial,
    };
    // Every graph check runs even when a reference is wrong, so one pass
    // reports every independent problem; what the dropped transitions might
    // have done is given the benefit of the doubt (`partial`), so their
    // absence causes no follow-on noise.
    graph_checks::reachability(&g, initial, cx);
    graph_checks::completeness(&g, cx);
    graph_checks::dead_transitions(&g, cx);
    graph_checks::termination(&g, cx);
    graph_checks::uncaught_permanent(&g, cx);

    if cx.diags.error_count() > errors_before {
        return None;
    }
    let (id, id_span) = id?;
    let slots = transitions.iter().filter(|t| t.slot.is_some()).count();
    let initial = initial?;
    let (worst, paths) = bounds::compute(&bounds::Input {
        states: &states,
        transitions: &transitions,
        outgoing: &outgoing,
        graph: &graph,
        initial,
        slots,
    });
    Some(Machine {
        id,
        version: version?,
        description: raw
            .description
            .map(|d| d.into_inner().to_owned())
            .unwrap_or_default(),
        source,
        content_hash: sha256_hex(cx.text),
        text: Arc::clone(&cx.shared),
        id_span,
        initial,
        states,
        transitions,
        outgoing,
        slots,
        worst,
        paths,
    })
}

/// Outgoing transitions per state, and the graph the checks and the worst
/// case walk: every transition, plus each bounded one's redirect edge.
fn graph_of(n: usize, transitions: &[Transition]) -> (Vec<Vec<usize>>, DiGraph<StateId, Edge>) {
    let mut outgoing = vec![Vec::new(); n];
    let mut graph: DiGraph<StateId, Edge> = DiGraph::new();
    for i in 0..n {
        graph.add_node(StateId(i as u32));
    }
    for (i, t) in transitions.iter().enumerate() {
        outgoing[t.from.index()].push(i);
        let (from, to) = (NodeIndex::new(t.from.index()), NodeIndex::new(t.to.index()));
        graph.add_edge(
            from,
            to,
            Edge {
                transition: i,
                redirect: false,
            },
        );
        if let Some(ex) = t.exhausted {
            let edge = Edge {
                transition: i,
                redirect: true,
            };
            graph.add_edge(from, NodeIndex::new(ex.index()), edge);
        }
    }
    (outgoing, graph)
}

pub(crate) fn sha256_hex(text: &str) -> String {
    Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect()
}

fn is_name(s: &str) -> bool {
    !s.is_empty()
        && s.chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-')
}

fn header_id(raw: &RawFile, cx: &mut Ctx) -> Option<(String, Range<usize>)> {
    let Some(id) = &raw.id else {
        cx.error(
            "fsm::invalid-field",
            0..0,
            "the file has no `id`".into(),
            "add `id = \"my_workflow\"` at the top of the file".into(),
        );
        return None;
    };
    if !is_name(id.get_ref()) {
        cx.error(
            "fsm::invalid-field",
            id.span(),
            format!("id `{}` is not a valid name", id.get_ref()),
            "use letters, digits, `_` and `-` only".into(),
        );
        return None;
    }
    Some((id.get_ref().to_string(), id.span()))
}

fn header_version(raw: &RawFile, cx: &mut Ctx) -> Option<semver::Version> {
    let Some(v) = &raw.version else {
        cx.error(
            "fsm::invalid-field",
            0..0,
            "the file has no `version`".into(),
            "add `version = \"1.0.0\"` (semver) at the top of the file".into(),
        );
        return None;
    };
    match semver::Version::parse(v.get_ref()) {
        Ok(ver) => Some(ver),
        Err(e) => {
            cx.error(
                "fsm::invalid-field",
                v.span(),
                format!("version `{}` is not semver: {e}", v.get_ref()),
                "write MAJOR.MINOR.PATCH, e.g. `1.0.0`".into(),
            );
            None
        }
    }
}

fn initial(
    raw: &RawFile,
    lookup: &HashMap<&str, StateId>,
    names: &[&str],
    cx: &mut Ctx,
) -> Option<StateId> {
    let Some(init) = &raw.initial else {
        cx.error(
            "fsm::missing-initial",
            0..0,
            "the file has no `initial` state".into(),
            "add `initial = \"<STATE>\"` naming the state every run starts in".into(),
        );
        return None;
    };
    let found = lookup.get(init.get_ref()).copied();
    if found.is_none() {
        cx.error(
            "fsm::unknown-initial",
            init.span(),
            format!("initial state `{}` is not defined", init.get_ref()),
            unknown_name_help(init.get_ref(), "state", names.iter().copied()),
        );
    }
    found
}

/// The states, and for each whether it was read only in part (an unknown
/// kind, or an emit rule that had to be dropped): the graph checks do not
/// judge what such a state emits.
fn states(raw: &RawFile, opts: &CompileOptions, cx: &mut Ctx) -> (Vec<State>, Vec<bool>) {
    let mut incomplete = Vec::with_capacity(raw.states.len());
    let states = raw
        .states
        .iter()
        .map(|(name, st)| {
            if !is_name(name.get_ref()) {
                cx.error(
                    "fsm::invalid-field",
                    name.span(),
                    format!("state name `{}` is not a valid name", name.get_ref()),
                    "use letters, digits, `_` and `-` only".into(),
                );
            }
            let on_enter = st
                .on_enter
                .iter()
                .map(|n| {
                    nonempty(n, "on_enter notification", cx);
                    n.get_ref().to_string()
                })
                .collect();
            let (kind, partly) = state_kind(name.get_ref(), st, opts, cx);
            incomplete.push(partly);
            State {
                name: name.get_ref().to_string(),
                kind,
                on_enter,
                span: name.span(),
            }
        })
        .collect();
    (states, incomplete)
}

fn nonempty(s: &Text, what: &str, cx: &mut Ctx) {
    if s.get_ref().trim().is_empty() {
        cx.error(
            "fsm::invalid-field",
            s.span(),
            format!("{what} is empty"),
            format!("give the {what} a name"),
        );
    }
}

/// The keys each kind of state takes (besides `kind` and `on_enter`).
fn kind_keys(kind: &str) -> Option<&'static [&'static str]> {
    Some(match kind {
        "input" => &["event"],
        "agent" => &["agent", "output", "timeout_secs", "emit", "retry", "catch"],
        "human" => &["question", "events"],
        "terminal" => &["outcome"],
        _ => return None,
    })
}

/// Keys present that do not belong to the state's kind.
fn misplaced_keys(name: &str, kind: &str, allowed: &[&str], st: &RawState, cx: &mut Ctx) {
    let span = |v: Option<&Text>| v.map(Spanned::span);
    let present: [(&str, Option<Range<usize>>); 10] = [
        ("event", span(st.event.as_ref())),
        ("agent", span(st.agent.as_ref())),
        ("output", span(st.output.as_ref())),
        ("timeout_secs", st.timeout_secs.as_ref().map(Spanned::span)),
        ("emit", st.emit.as_ref().map(Spanned::span)),
        ("outcome", span(st.outcome.as_ref())),
        ("retry", st.retry.as_ref().map(Spanned::span)),
        ("catch", st.catch.as_ref().map(Spanned::span)),
        ("question", span(st.question.as_ref())),
        ("events", st.events.as_ref().map(Spanned::span)),
    ];
    for (key, span) in present {
        if let Some(span) = span.filter(|_| !allowed.contains(&key)) {
            let help = match (kind, key) {
                ("input", "question" | "events") => {
                    "a gate mid-workflow is `kind = \"human\"`, with `question` and `events`".into()
                }
                _ => format!(
                    "remove `{key}`; a {kind} state takes: {}",
                    allowed.join(", ")
                ),
            };
            cx.error(
                "fsm::invalid-field",
                span,
                format!("`{key}` is not allowed in {kind} state `{name}`"),
                help,
            );
        }
    }
}

/// A key a state of this kind must have: its value (reported when missing
/// or empty, then `""` so the checks go on).
pub(crate) fn required_text(
    field: Option<&Text>,
    key: &str,
    name: &str,
    kind: &Text,
    cx: &mut Ctx,
) -> String {
    match field {
        Some(v) => {
            if v.get_ref().trim().is_empty() {
                nonempty(v, &format!("`{key}`"), cx);
            }
            v.get_ref().to_string()
        }
        None => {
            cx.error(
                "fsm::invalid-field",
                kind.span(),
                format!("{} state `{name}` has no `{key}`", kind.get_ref()),
                format!("add `{key} = ...` to state `{name}`"),
            );
            String::new()
        }
    }
}

// The placeholder keeps going after an error so later checks still run;
// `true` when the state was read only in part.
fn state_kind(name: &str, st: &RawState, opts: &CompileOptions, cx: &mut Ctx) -> (StateKind, bool) {
    let kind = *st.kind.get_ref();
    let Some(allowed) = kind_keys(kind) else {
        cx.error(
            "fsm::invalid-field",
            st.kind.span(),
            format!("state `{name}` has unknown kind `{kind}`"),
            "use `input`, `agent`, `human` or `terminal`".into(),
        );
        let placeholder = StateKind::Input {
            event: String::new(),
        };
        return (placeholder, true);
    };
    misplaced_keys(name, kind, allowed, st, cx);
    match kind {
        "input" => {
            if let Some(e) = &st.event {
                reserved(e, cx);
            }
            let event = required_text(st.event.as_ref(), "event", name, &st.kind, cx);
            (StateKind::Input { event }, false)
        }
        "agent" => agent_state(name, st, opts, cx),
        "human" => (gates::human(name, st, cx), false),
        _ => (
            StateKind::Terminal {
                outcome: ending(name, st, cx),
            },
            false,
        ),
    }
}

fn agent_state(
    name: &str,
    st: &RawState,
    opts: &CompileOptions,
    cx: &mut Ctx,
) -> (StateKind, bool) {
    let agent = required_text(st.agent.as_ref(), "agent", name, &st.kind, cx);
    let output = required_text(st.output.as_ref(), "output", name, &st.kind, cx);
    let schema = st.output.as_ref().and_then(|o| output_schema(o, opts, cx));
    let checked = schema.as_ref().map(|s| (output.as_str(), s));
    let (emit, dropped) = emit_rules(st, checked, cx);
    let retry = recovery::retry_rules(st.retry.as_ref(), name, cx);
    let catch = recovery::catch_rules(st.catch.as_ref(), cx);
    if agent == super::lifecycle::SELF_AGENT
        && let Some(span) =
            (st.retry.as_ref().map(Spanned::span)).or_else(|| st.catch.as_ref().map(Spanned::span))
    {
        cx.error(
            "fsm::invalid-field",
            span,
            format!("lifecycle state `{name}` has `retry` or `catch`"),
            "retries and catches belong to the workflow's agent states; a lifecycle follows one invocation".into(),
        );
    }
    let state = StateKind::Agent(AgentState {
        agent,
        timeout_secs: timeout(st, cx),
        emit,
        output,
        retry,
        catch,
    });
    (state, dropped)
}

fn ending(name: &str, st: &RawState, cx: &mut Ctx) -> Ending {
    match st.outcome.as_ref().map(|o| (*o.get_ref(), o.span())) {
        Some(("success", _)) => Ending::Success,
        Some(("failure", _)) => Ending::Failure,
        Some((other, span)) => {
            cx.error(
                "fsm::invalid-field",
                span,
                format!("terminal state `{name}` has unknown outcome `{other}`"),
                "use `success` or `failure`".into(),
            );
            Ending::Failure
        }
        None => {
            required_text(None, "outcome", name, &st.kind, cx);
            Ending::Failure
        }
    }
}

/// An event a file may not name: `catch:…` is what `check` calls the
/// transitions it synthesises from `catch` rules.
pub(crate) fn reserved(event: &Text, cx: &mut Ctx) -> bool {
    let taken = event.get_ref().starts_with(CATCH_PREFIX);
    if taken {
        cx.error(
            "fsm::reserved-event",
            event.span(),
            format!("event `{}` uses the reserved prefix `{CATCH_PREFIX}`", event.get_ref()),
            "modix names the transitions of `catch` rules `catch:<class>`; write a `catch` rule on the state instead, or rename the event".into(),
        );
    }
    taken
}

fn timeout(st: &RawState, cx: &mut Ctx) -> Option<u64> {
    let t = st.timeout_secs.as_ref()?;
    match u64::try_from(*t.get_ref()) {
        Ok(v) if (1..=super::MAX_TIMEOUT_SECS).contains(&v) => Some(v),
        _ => {
            cx.error(
                "fsm::invalid-field",
                t.span(),
                format!(
                    "timeout_secs = {} is out of range (1 to {})",
                    t.get_ref(),
                    super::MAX_TIMEOUT_SECS
                ),
                "give the timeout in whole seconds, at least 1 and at most a year".into(),
            );
            None
        }
    }
}

/// The output schema a state names, parsed for checking its conditions;
/// `None` for `any` (unchecked), an empty name, a project schema with
/// errors (reported with its file), or an unknown id (reported).
fn output_schema(output: &Text, opts: &CompileOptions, cx: &mut Ctx) -> Option<serde_json::Value> {
    let id = *output.get_ref();
    if id == crate::schema::ANY || id.trim().is_empty() || opts.schemas.is_broken(id) {
        return None;
    }
    let value = opts.schemas.value(id);
    if value.is_none() {
        cx.error(
            "fsm::unknown-output",
            output.span(),
            format!("unknown output schema `{id}`"),
            unknown_name_help(id, "output schema", opts.schemas.output_ids()),
        );
    }
    value
}

/// The emit rules of an agent state; each `when` is checked against the
/// state's output schema (`schema`: its id and JSON) when there is one.
fn emit_rules(
    st: &RawState,
    schema: Option<(&str, &serde_json::Value)>,
    cx: &mut Ctx,
) -> (Vec<EmitRule>, bool) {
    let Some(rules) = &st.emit else {
        return (Vec::new(), false);
    };
    let mut out = Vec::new();
    let mut dropped = false;
    for r in rules.get_ref() {
        let r = r.get_ref();
        nonempty(&r.event, "emitted event", cx);
        reserved(&r.event, cx);
        let Some(on) = r.on.get_ref().parse::<Outcome>().ok() else {
            cx.error(
                "fsm::invalid-field",
                r.on.span(),
                format!("unknown outcome kind `{}` in an emit rule", r.on.get_ref()),
                "use `output`, `invalid_output`, `process_error` or `timeout`".into(),
            );
            dropped = true;
            continue;
        };
        let when = match (&r.when, on) {
            (None, _) => None,
            (Some(w), Outcome::Output) => match Condition::parse(w.get_ref()) {
                Ok(c) => {
                    if let Some((id, schema)) = schema
                        && let Err(p) = c.check_against(id, schema)
                    {
                        cx.error(p.code, w.span(), p.message, p.help);
                    }
                    Some(c)
                }
                Err(msg) => {
                    let help = "write `<field> == <JSON value>`, e.g. `passed == true`";
                    cx.error("fsm::invalid-field", w.span(), msg, help.into());
                    dropped = true;
                    continue;
                }
            },
            (Some(w), _) => {
                cx.error(
                    "fsm::invalid-field",
                    w.span(),
                    format!(
                        "`when` is only allowed on `output` rules, not `{}`",
                        on.as_str()
                    ),
                    "remove `when`: only validated output has fields to test".into(),
                );
                // The rule is otherwise clear: kept, so nothing else is
                // reported about this outcome.
                None
            }
        };
        out.push(EmitRule {
            on,
            when,
            event: r.event.get_ref().to_string(),
        });
    }
    (out, dropped)
}

/// Span of the first emit rule (input `event`, gate event) of state `index` that emits
/// `event`; looked up only when a check reports it.
pub(crate) fn emit_event_span(raw: &RawFile, index: usize, event: &str) -> Option<Range<usize>> {
    let (_, st) = raw.states.get(index)?;
    let rules = st.emit.iter().flat_map(|r| r.get_ref());
    let gate = st.events.iter().flat_map(|e| e.get_ref());
    rules
        .map(|r| &r.get_ref().event)
        .chain(&st.event)
        .chain(gate)
        .find(|e| *e.get_ref() == event)
        .map(Spanned::span)
}

/// `max` as written (checked to be in range and paired with `exhausted`),
/// or the project's loop bound when only `exhausted` is given.
fn bound(
    t: &super::spec::RawTransition,
    exhausted: Option<Option<StateId>>,
    opts: &CompileOptions,
    cx: &mut Ctx,
) -> Option<u32> {
    match (&t.max, exhausted) {
        (Some(m), _) if !(1..=i64::from(u32::MAX)).contains(m.get_ref()) => {
            cx.error(
                "fsm::invalid-field",
                m.span(),
                format!("max = {} is out of range (1 to {})", m.get_ref(), u32::MAX),
                format!(
                    "a bound is how many times the transition may fire: a whole number from 1 to {}",
                    u32::MAX
                ),
            );
            None
        }
        (Some(m), Some(None)) => {
            cx.error(
                "fsm::max-without-exhausted",
                m.span(),
                format!(
                    "transition {} —{}→ {} has `max` but no `exhausted` state",
                    t.from.get_ref(),
                    t.event.get_ref(),
                    t.to.get_ref()
                ),
                "add `exhausted = \"<STATE>\"`: where the run goes once the bound is used up"
                    .into(),
            );
            None
        }
        (Some(m), _) => u32::try_from(*m.get_ref()).ok(),
        (None, Some(Some(_))) => Some(opts.default_max),
        (None, _) => None,
    }
}

/// A second transition on the same event from the same state: the same
/// target is a duplicate, another one makes the machine nondeterministic.
#[allow(clippy::too_many_arguments)]
fn repeated_event(
    prev: &Transition,
    from: StateId,
    to: StateId,
    event: &str,
    span: &Range<usize>,
    t: &super::spec::RawTransition,
    states: &[State],
    cx: &mut Ctx,
) {
    let shown = |id: StateId| states[id.index()].name.as_str();
    if prev.to == to {
        cx.error(
            "fsm::duplicate-transition",
            span.clone(),
            format!(
                "transition {} —{event}→ {} is defined twice",
                shown(from),
                shown(to)
            ),
            "delete one of the two entries".into(),
        );
    } else {
        cx.error(
            "fsm::nondeterministic",
            t.event.span(),
            format!(
                "state `{}` has two transitions on event `{event}` (to `{}` and to `{}`)",
                shown(from),
                shown(prev.to),
                shown(to)
            ),
            "one event must lead to one state: delete one transition or give it another event"
                .into(),
        );
    }
}

fn transitions(
    raw: &RawFile,
    states: &[State],
    lookup: &HashMap<&str, StateId>,
    names: &[&str],
    opts: &CompileOptions,
    cx: &mut Ctx,
) -> (Vec<Transition>, Partial) {
    let mut out: Vec<Transition> = Vec::new();
    let mut partial = Partial::default();
    let mut seen: HashMap<(StateId, &str), usize> = HashMap::with_capacity(raw.transitions.len());
    for t in &raw.transitions {
        let span = t.span();
        let t = t.get_ref();
        let resolve = |s: &Text, role: &str, cx: &mut Ctx| {
            let found = lookup.get(s.get_ref()).copied();
            if found.is_none() {
                cx.error(
                    "fsm::unknown-state",
                    s.span(),
                    format!("transition {role} unknown state `{}`", s.get_ref()),
                    unknown_name_help(s.get_ref(), "state", names.iter().copied()),
                );
            }
            found
        };
        let from = resolve(&t.from, "from", cx);
        let to = resolve(&t.to, "to", cx);
        let exhausted = match &t.exhausted {
            Some(e) => resolve(e, "exhausted to", cx).map(Some),
            None => Some(None),
        };
        nonempty(&t.event, "transition event", cx);
        let max = bound(t, exhausted, opts, cx);
        let event = *t.event.get_ref();
        if reserved(&t.event, cx) {
            let event = event.to_owned();
            partial.dropped.push(Dropped { from, to, event });
            continue;
        }
        let (Some(from), Some(to)) = (from, to) else {
            let meant = |s: &Text| {
                let near = crate::diagnostics::closest(s.get_ref(), names.iter().copied());
                near.and_then(|n| lookup.get(n).copied())
            };
            let (from, to) = (from.or_else(|| meant(&t.from)), to.or_else(|| meant(&t.to)));
            let event = event.to_owned();
            partial.dropped.push(Dropped { from, to, event });
            continue;
        };
        // An unknown `exhausted` target was reported; the transition stays.
        let exhausted = exhausted.flatten();
        let from_state = &states[from.index()];
        if from_state.is_terminal() {
            cx.error(
                "fsm::terminal-exit",
                t.from.span(),
                format!("transition leaves terminal state `{}`", from_state.name),
                "a terminal state ends the run; remove this transition or make the state non-terminal"
                    .into(),
            );
            continue;
        }
        if let Some(&prev) = seen.get(&(from, event)) {
            repeated_event(&out[prev], from, to, event, &span, t, states, cx);
            let (from, to, event) = (Some(from), Some(to), event.to_owned());
            partial.dropped.push(Dropped { from, to, event });
            continue;
        }
        seen.insert((from, event), out.len());
        // `max` without a usable exhausted target was reported above.
        let bounded = max.is_some() && exhausted.is_some();
        if !bounded && (t.max.is_some() || t.exhausted.is_some()) {
            partial.bound_unknown.push(out.len());
        }
        out.push(Transition {
            from,
            event: event.to_owned(),
            to,
            max: max.filter(|_| bounded),
            exhausted: exhausted.filter(|_| bounded),
            span,
            slot: None,
        });
    }
    let mut next = 0;
    for t in &mut out {
        if t.max.is_some() {
            t.slot = Some(next);
            next += 1;
        }
    }
    (out, partial)
}
