//! What other processes ask of a running run (`modix stop`, `modix stop
//! --now`), taken from the store's `controls` table. A task on the engine's
//! runtime reads the run's open requests every [`POLL`], so a stop is
//! acknowledged within a second whether the run is between steps or waiting
//! on an agent: a graceful stop is noted for the next step boundary; a stop
//! now also cancels the running agent, as Ctrl-C would. Signals to the modix
//! process itself are forwarded the same way, so the run has one cancel.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::watch;

use crate::store::{ControlKind, Store};

/// How often the run's open requests are read.
pub(super) const POLL: Duration = Duration::from_millis(200);

/// Why the run must stop, once something asked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum StopAsked {
    /// `modix stop`: at the next step boundary.
    AtBoundary { by: String },
    /// `modix stop --now`: the running agent is cancelled too.
    Now { by: String },
}

/// The run's view of requests from outside, shared with the watching task.
#[derive(Clone, Default)]
pub(super) struct Controls {
    asked: Arc<Mutex<Option<StopAsked>>>,
}

impl Controls {
    /// The stop asked for, if any.
    pub fn stop_asked(&self) -> Option<StopAsked> {
        self.asked.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    pub fn ask(&self, stop: StopAsked) {
        let mut asked = self.asked.lock().unwrap_or_else(|p| p.into_inner());
        // A stop now outranks a graceful one.
        if !matches!(*asked, Some(StopAsked::Now { .. })) {
            *asked = Some(stop);
        }
    }
}

/// Starts watching run `run_id`'s requests (and forwarding `engine`'s
/// Ctrl-C/SIGTERM): the returned receiver is the run's cancel, set by
/// either. The task ends with the runtime's current `block_on`.
pub(super) fn watch(
    db: PathBuf,
    run_id: String,
    engine: watch::Receiver<bool>,
) -> (Controls, watch::Receiver<bool>, tokio::task::JoinHandle<()>) {
    let (tx, rx) = watch::channel(*engine.borrow());
    let controls = Controls::default();
    let seen = controls.clone();
    let task = tokio::spawn(async move {
        let mut engine = engine;
        // A store of its own: the run's connection is busy with the step.
        let mut store = Store::open(&db).ok();
        loop {
            tokio::select! {
                _ = engine.wait_for(|stop| *stop) => {
                    let _ = tx.send(true);
                    return;
                }
                _ = tokio::time::sleep(POLL) => {}
            }
            let Some(s) = store.as_mut() else { continue };
            let Ok(open) = s.open_controls(&run_id) else {
                continue;
            };
            let mut taken = Vec::new();
            for c in open {
                match c.kind {
                    ControlKind::Stop => seen.ask(StopAsked::AtBoundary { by: c.by }),
                    ControlKind::StopNow => {
                        seen.ask(StopAsked::Now { by: c.by });
                        let _ = tx.send(true);
                    }
                    ControlKind::Pending => continue,
                }
                taken.push(c.id);
            }
            // Acknowledged: `modix stop` waits for this.
            let _ = s.take_controls(&taken);
        }
    });
    (controls, rx, task)
}
