//! A write transaction begun and ended through cached statements.
//!
//! rusqlite's `Transaction` runs `BEGIN IMMEDIATE` and `COMMIT` through
//! `execute_batch`, which parses and prepares the text at every use: two
//! statements compiled per step, ~5 % of a trivial step's record in a
//! profile. Here they are prepared once per connection (rusqlite's
//! statement cache). The semantics are rusqlite's: the write lock is taken
//! at the start (waiting as `busy_timeout` says), and a transaction that
//! is not committed — an error on the way, a failed `COMMIT` — is rolled
//! back when dropped.

use std::ops::Deref;

use rusqlite::Connection;

/// An open `BEGIN IMMEDIATE` transaction on a connection.
pub(crate) struct Tx<'c> {
    conn: &'c Connection,
    open: bool,
}

impl<'c> Tx<'c> {
    /// Begins, holding the write lock from the start. `&mut` as rusqlite
    /// asks of a transaction: nothing else uses the connection meanwhile.
    pub(crate) fn immediate(conn: &'c mut Connection) -> rusqlite::Result<Tx<'c>> {
        run(conn, "BEGIN IMMEDIATE")?;
        Ok(Tx { conn, open: true })
    }

    /// Begins, holding the exclusive lock (no reader either): a migration.
    pub(crate) fn exclusive(conn: &'c mut Connection) -> rusqlite::Result<Tx<'c>> {
        run(conn, "BEGIN EXCLUSIVE")?;
        Ok(Tx { conn, open: true })
    }

    pub(crate) fn commit(mut self) -> rusqlite::Result<()> {
        run(self.conn, "COMMIT")?;
        self.open = false;
        Ok(())
    }
}

impl Deref for Tx<'_> {
    type Target = Connection;

    fn deref(&self) -> &Connection {
        self.conn
    }
}

impl Drop for Tx<'_> {
    fn drop(&mut self) {
        // Still open after a failed COMMIT (SQLite may keep it open then)
        // or an error before it: nothing of it stays. A rollback of a
        // transaction SQLite already ended is an error to ignore.
        if self.open && !self.conn.is_autocommit() {
            let _ = run(self.conn, "ROLLBACK");
        }
    }
}

fn run(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conn() -> Connection {
        let c = Connection::open_in_memory().unwrap();
        c.execute_batch("CREATE TABLE t (x INTEGER)").unwrap();
        c
    }

    fn rows(c: &Connection) -> i64 {
        c.query_row("SELECT count(*) FROM t", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn a_committed_transaction_stays_and_a_dropped_one_goes() {
        let mut c = conn();
        let tx = Tx::immediate(&mut c).unwrap();
        tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
        tx.commit().unwrap();
        {
            let tx = Tx::immediate(&mut c).unwrap();
            tx.execute("INSERT INTO t VALUES (2)", []).unwrap();
        }
        assert_eq!(rows(&c), 1);
        assert!(c.is_autocommit());
        // And the connection begins again after both.
        let tx = Tx::immediate(&mut c).unwrap();
        tx.execute("INSERT INTO t VALUES (3)", []).unwrap();
        tx.commit().unwrap();
        assert_eq!(rows(&c), 2);
    }

    #[test]
    fn a_failed_commit_is_rolled_back() {
        let mut c = conn();
        c.execute_batch(
            "CREATE TABLE p (id INTEGER PRIMARY KEY);
             CREATE TABLE ch (p INTEGER REFERENCES p(id) DEFERRABLE INITIALLY DEFERRED);
             PRAGMA foreign_keys = ON;",
        )
        .unwrap();
        let tx = Tx::immediate(&mut c).unwrap();
        tx.execute("INSERT INTO t VALUES (1)", []).unwrap();
        tx.execute("INSERT INTO ch VALUES (42)", []).unwrap();
        assert!(
            tx.commit().is_err(),
            "a deferred foreign key fails at COMMIT"
        );
        assert!(c.is_autocommit());
        assert_eq!(rows(&c), 0);
    }
}
