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
}

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
}
