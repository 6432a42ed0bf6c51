// Package volume keeps the data of stateful slots on a node and moves it
// with the slot (issue 16, website/stateful.md): a volume is a directory
// that belongs to a count slot <unit>/<k>, not to the node.
//
// # Data flow of a planned handoff
//
//	old holder (child stopped)                     new holder (slot acquired)
//	─────────────────────────                      ──────────────────────────
//	Snapshot: hook, then one hashing pass
//	  over <Root>/u/k/data (nothing written)
//	  -> Meta{sha256, size}, kept in
//	  .snapshots/u/k/data.json
//	integrator: txn [check-session slots/u/k,
//	  set handoffs/u/k {node, url, sha256,
//	  size, term_index}, unlock]        ───────>  integrator: reads handoffs/u/k
//	                                               Restore(Source{url, sha256, size, session})
//	Handler: GET /v1/volumes/u/k/data    <───────    GET ?sha256=  (authorize: holds the slot?)
//	  ?sha256=  streams the archive of the
//	  directory (file contents by sendfile) ───────>  sha256 + byte count -> tar reader ->
//	                                                    <Root>/u/k/data.restore-<random>/
//	                                                  at EOF: size and sha256 as published?
//	                                                  restore hook in the new directory
//	                                                  flush (syncfs); rename data -> data.aside,
//	                                                    data.restore-* -> data; rm data.aside
//	                                                  integrator starts the child
//
// # Layout under Store.Root
//
//	<unit>/<k>/<path>/                      the live data: the child's directory (Dir)
//	<unit>/<k>/<path>.restore-<random>/     a restore in progress (removed on failure, by Recover)
//	<unit>/<k>/<path>.aside/                the previous data during a swap (see Recover)
//	.snapshots/<unit>/<k>/<path>.json       the Meta of the last Snapshot (the directory is the snapshot)
//	.snapshots/<unit>/<k>/<path>.tar        the last SnapshotFile, read-only, and
//	.snapshots/<unit>/<k>/<path>.tar.json   its Meta
//	.copies/<unit>/<k>/<path>/<taken_at>-<sha256>.tar
//	                                        copies pushed by the holder, read-only, the newest
//	                                        KeepCopies (2); taken_at in UnixNano, 20 digits
//	.copies/<unit>/<k>/<path>/.incoming-*   a copy being received
//	.snapshots/.../.tmp-*                   a snapshot file or a record being written
//
// Unit and volume names are letters, digits, '-', '_' and '.', not starting
// with '.' (so never "..", nor the store's dot-directories), one path
// component each; a volume name cannot end in ".aside" nor contain
// ".restore-". The API refuses anything else with 400 before touching the
// disk.
//
// # The safety argument
//
//  1. Who may write: the slot's lock. The old holder publishes a handoff
//     only in a transaction fenced by check-session (the integrator's), so
//     a holder that lost the slot cannot publish one, and the handler
//     serves a snapshot only to a caller authorize accepts (the
//     integrator: the caller's session holds the slot now).
//  2. What is restored is exactly what was published. Snapshot hashes the
//     stopped directory; the handler streams the same directory again,
//     which gives the same bytes because the archive is deterministic
//     (archive.go: sorted walk, fixed fields) and the child is stopped.
//     Restore hashes and counts every byte it receives and accepts the
//     result only if the size and the SHA-256 are the published ones, at
//     the end of the stream. A flipped byte, a truncated stream, a
//     directory that changed after its snapshot, a server that sends
//     more: all refused (the server also cuts a stream whose length is
//     not the snapshot's, and answers 409 from then on).
//  3. Never a partial directory in place of a good one. The archive is
//     unpacked into a new directory next to the live one (same
//     filesystem), the restore hook runs there, the tree is flushed to
//     the disk (unless Store.NoSync), and only then two renames swap it
//     in. A failure at any step before
//     removes the new directory and leaves the live one untouched. A crash
//     between the two renames leaves <path>.aside and no <path>: Recover
//     (Open) or the volume's next Restore, Snapshot or Ensure renames it
//     back (the old data; the restore is done again, the child never
//     started on a partial one); a crash after them leaves both: the aside
//     one is removed.
//  4. Nothing outside the new directory is written by an unpack: entries
//     must be clean relative paths whose parent is a directory an earlier
//     entry created (so never through a symlink, wherever the archive's
//     symlinks point), files are created with O_EXCL|O_NOFOLLOW, a name
//     appears once, only regular files, directories and symlinks are
//     accepted (FuzzRestore, TestUnpackRefuses).
//  5. Bounded: memory (about 4 MiB of buffers; the body is never held), bytes (no
//     more than the published size is read), time (Restore's timeout
//     covers the fetch, the unpack and the hook, whose process group is
//     killed). Transport errors are tried again from the start, up to 3
//     attempts; a checksum or size mismatch, a 403, 404 or 409 never.
//
// What is not in the archive: uid and gid (fixed to 0), atimes, xattrs
// and ACLs, hard links (each name becomes a file of its own), sockets
// (skipped); devices and named pipes fail the snapshot. The restored files
// belong to mariposa's user: a service running as another user needs a
// chown (the restore hook or the integrator).
//
// # Why the handoff writes no snapshot file
//
// A snapshot file costs a full extra write of the volume, on the service's
// downtime, before the transfer can start; the hashing pass reads the
// directory once and writes nothing, and the handler then streams the same
// directory (headers and small files gathered in 256 KiB writes, large
// files with sendfile). BenchmarkHandoff measures both, in the same run
// (2 vCPUs, ext4, page cache warm, no fsync, a machine shared with other
// jobs):
//
//	                     snapshot   transfer+unpack   handoff   cp -a   ratio
//	100 MB, directory      0.12 s       0.78 s         0.99 s   0.68 s   0.68 (median of 5)
//	100 MB, file           0.14 s       1.10 s         1.24 s
//	1 GB, directory        1.02 s       3.26 s         4.28 s   2.35 s   0.55
//	1 GB, file             1.71 s       4.56 s         6.27 s
//
// The hashing pass runs at the speed of SHA-256 (about 1 GB/s here, SHA-NI;
// the reads are overlapped with it), and the receiver hashes again: two
// sequential SHA-256 passes are the floor of a verified handoff. The rest
// of the receiver's time is creating files: 11,272 files for 1 GB. The
// ratio moves with the machine's state, since cp -a's in-kernel copy and
// file creation are what vary: in a run where creating files was fast (cp
// -a of 100 MB in 0.14 s), the handoff took 0.39 s, a ratio of 0.36. With
// the flush (the Store's default, one syncfs), 8.09 s for 1 GB against
// 5.51 s for cp -a and sync -f (0.68).
//
// # Periodic copies and unplanned loss
//
// While the child runs, the integrator calls SnapshotFile every interval
// (the hook makes the directory consistent, or the user accepts a copy of
// files being written) and Push to each of the replicas, and records
// {node, sha256, size, taken_at} in volumes/<unit>/<k>/<volume>/copies.
// A node keeps the newest two copies it received per volume. After an
// unplanned loss, with on_missing = "latest", the new holder restores the
// newest recorded copy with the same Restore and a Source on the node that
// holds it: LatestCopyURL(node, unit, k, path, sha256) with that copy's
// sha256 and size (a node that holds the copy itself uses its own address:
// one code path, one verification). The data lost is the age of that copy.
package volume
