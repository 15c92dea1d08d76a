//! Files compiled into the binary so an installed `modix` works anywhere:
//! the JSON Schemas, the shipped FSMs and the `.modix/` template.

use include_dir::{Dir, include_dir};

pub static SCHEMAS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/schemas");
pub static FSMS: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/fsm");
pub static TEMPLATE: Dir<'static> = include_dir!("$CARGO_MANIFEST_DIR/.modix-template");
