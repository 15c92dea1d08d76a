//! Why an invocation failed, as a class: decided from the CLI's own signals
//! (exit codes, stream events, known messages) by the shell's rules, routed
//! by a workflow state's `retry` and `catch`, recorded with the invocation.
//! One vocabulary for the config (`shells.json` rules), the workflow TOML,
//! the store and every view.

use serde::{Deserialize, Serialize};

use super::Outcome;

#[derive(
    Debug,
    Clone,
    Copy,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    Serialize,
    Deserialize,
    strum::Display,
    strum::EnumString,
    strum::IntoStaticStr,
    strum::VariantArray,
    strum::VariantNames,
)]
#[serde(rename_all = "snake_case")]
#[strum(serialize_all = "snake_case")]
pub enum FailureClass {
    /// No key, a wrong key, not logged in.
    Auth,
    /// The API said "too many requests" (429).
    RateLimited,
    /// The API is overloaded or failing on its side (529, 5xx).
    Overloaded,
    /// The API could not be reached.
    Network,
    /// The invocation ran past its wall-clock limit.
    Timeout,
    /// The agent printed nothing (but keep-alives) for the idle limit.
    Idle,
    /// A run or invocation budget (cost, tokens, turns, time) was used up.
    BudgetExceeded,
    /// The CLI refused its command line (an unknown flag, exit 2).
    BadInvocation,
    /// The program, its interpreter or the model does not exist.
    NotFound,
    /// The process was killed by a signal it did not ask for.
    Crashed,
    /// The agent answered, but not with valid output.
    InvalidOutput,
    /// The agent ran and reported failure.
    AgentError,
}

impl FailureClass {
    /// Whether the same invocation may succeed if tried again later, by
    /// default: the API's load and reachability pass; a wrong key does not.
    pub fn transient(self) -> bool {
        matches!(
            self,
            FailureClass::RateLimited | FailureClass::Overloaded | FailureClass::Network
        )
    }

    /// The outcome the workflow's emit rules see for a failure of this class.
    pub fn outcome(self) -> Outcome {
        match self {
            FailureClass::InvalidOutput => Outcome::InvalidOutput,
            FailureClass::Timeout | FailureClass::Idle => Outcome::Timeout,
            _ => Outcome::ProcessError,
        }
    }

    pub fn as_str(self) -> &'static str {
        self.into()
    }

    /// Whether a failure of this class will happen again however often the
    /// invocation is repeated, until a person changes something (a key, the
    /// command line, the program, the budget). An agent state of a workflow
    /// without a `catch` for each of these is warned about (`fsm::uncaught-permanent`):
    /// its emit rules would see a plain `process_error` and could send the
    /// run round a loop that cannot succeed.
    pub fn permanent(self) -> bool {
        PERMANENT.contains(&self)
    }

    /// The event of the transition a `catch` of this class takes
    /// (`catch:auth`): synthesised at compile time from the state's `catch`
    /// rules, spelled so no FSM file can write it.
    pub fn catch_event(self) -> &'static str {
        match self {
            FailureClass::Auth => "catch:auth",
            FailureClass::RateLimited => "catch:rate_limited",
            FailureClass::Overloaded => "catch:overloaded",
            FailureClass::Network => "catch:network",
            FailureClass::Timeout => "catch:timeout",
            FailureClass::Idle => "catch:idle",
            FailureClass::BudgetExceeded => "catch:budget_exceeded",
            FailureClass::BadInvocation => "catch:bad_invocation",
            FailureClass::NotFound => "catch:not_found",
            FailureClass::Crashed => "catch:crashed",
            FailureClass::InvalidOutput => "catch:invalid_output",
            FailureClass::AgentError => "catch:agent_error",
        }
    }

    /// The class a catch event names (`catch:auth` → `Auth`).
    pub fn from_catch_event(event: &str) -> Option<FailureClass> {
        event.strip_prefix(CATCH_PREFIX)?.parse().ok()
    }
}

/// The prefix of every synthesised catch event; reserved (`fsm::reserved-event`).
pub const CATCH_PREFIX: &str = "catch:";

/// The classes [`FailureClass::permanent`] names, in the order warnings list them.
pub const PERMANENT: [FailureClass; 4] = [
    FailureClass::Auth,
    FailureClass::NotFound,
    FailureClass::BadInvocation,
    FailureClass::BudgetExceeded,
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_spell_themselves_once() {
        assert_eq!("rate_limited".parse(), Ok(FailureClass::RateLimited));
        assert_eq!(FailureClass::BadInvocation.to_string(), "bad_invocation");
        assert!(FailureClass::Overloaded.transient());
        assert!(!FailureClass::Auth.transient());
        assert_eq!(FailureClass::Idle.outcome(), Outcome::Timeout);
    }

    #[test]
    fn catch_events_name_their_class() {
        use strum::VariantArray as _;
        for &c in FailureClass::VARIANTS {
            assert_eq!(c.catch_event(), format!("{CATCH_PREFIX}{c}"));
            assert_eq!(FailureClass::from_catch_event(c.catch_event()), Some(c));
            assert!(!(c.permanent() && c.transient()), "{c}");
        }
        assert_eq!(FailureClass::from_catch_event("catch:nope"), None);
        assert_eq!(FailureClass::from_catch_event("auth"), None);
    }
}
