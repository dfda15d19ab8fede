// Package ledger is a node's local, tamper-evident record of what it owes
// and is owed, kept in the node's single Badger database.
//
// The ledger is an append-only hash chain. Every Entry carries the hash of
// its predecessor (PrevHash; the genesis entry links to ZeroHash) and its own
// Hash, the hex SHA-256 of a canonical binary encoding of all its other
// fields, sequence number included. An entry and the new chain head are
// written in one synchronous Badger transaction, so a crash (even kill -9)
// leaves either the old head or the new one, never a torn chain, and an entry
// whose Append returned is durable.
//
// Verify walks the whole chain and reports the first entry that was altered,
// removed, reordered or replaced, as a *TamperError. The chain is
// tamper-evident against edits of the stored data, not against an attacker
// who rewrites the whole chain from the altered entry on: anchoring the head
// hash elsewhere (for example in signed receipts exchanged with peers) is
// what makes a rewrite detectable.
//
// The ledger has an owner once its node rotated its identity key: a
// succession entry (KindSuccession) holds the succession signed by both the
// old and the new key, and the chain goes on under the new identity (Owner).
// Each succession must hand over from the owner before it, and Verify checks
// both signatures of each, so even a rewrite of the chain cannot forge one.
//
// The same database also holds the daemon's own state (jobs, leases...)
// through State, a tiny namespaced JSON key-value store whose keys live under
// their own prefix, so they never collide with the ledger and Verify ignores
// them.
//
// A lease is settled once: the ledger indexes the lease ids of its receipt
// and payment entries and refuses a second one (ErrAlreadySettled) in the
// appending transaction itself. Below a floor of free disk space
// (WithMinFreeSpace) it refuses to open or write (ErrDiskFull) rather than
// let Badger fail in the middle of a write.
//
// A data directory can be opened by one DB at a time: a second Open, from
// this process or another, fails with an error matching ErrInUse.
package ledger
