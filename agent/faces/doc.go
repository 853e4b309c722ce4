// Package faces is the gateway's face store: the persons' face data (templates or
// photos) that the back office's tasks bring, kept on disk once per gateway however many
// persons and terminals use a face, for sending to terminals in chunks. A face is named by
// its SHA-256 (content-addressed): the same data is one file, and a face the store holds
// is exactly the data that hashes to its name.
//
// # Tutorial
//
//	st, err := faces.Open("/var/lib/faceagent/faces", faces.Options{MaxBytes: cfg.Faces.MaxBytes})
//	if err != nil { ... }
//	defer st.Close()
//	// Intake: a Pin per task holds its faces until its desired-state change is durable.
//	sum, _ := faces.ParseSum(person.Face.SHA256)
//	pin := st.Pin()
//	err = pin.Put(sum, int64(len(data)), bytes.NewReader(data)) // hashed while written; durable on nil
//	ok := pin.Keep(other)                                       // a face the task refers to without data
//	...make the desired state durable (it now refers to sum and other)...
//	pin.Release()
//	// Sender: chunks from any offset.
//	f, err := st.Open(sum)
//	n, err := f.ReadAt(chunk[:4096], have)
//	f.Close()
//	// Garbage collection: a sweep against the durable desired state.
//	m := st.Mark()                                  // first
//	inUse := desired.FaceSums()                     // then read what the desired persons refer to
//	removed, err := st.Sweep(m, func(s faces.Sum) bool { _, ok := inUse[s]; return ok })
//	// Or a Sweeper: one sweep at start, one per burst of changes.
//	sw := faces.NewSweeper(st, faces.SweeperOptions{InUse: readDesiredFaces})
//	sw.Start(ctx); sw.Changed() /* after each desired-state change */; sw.Wait()
//
// # Writing a face
//
// Put streams the data from an io.Reader into a temporary file (".tmp-…") in the store's
// directory, hashing it on the way, and refuses it (ErrHashMismatch, ErrSize) unless it is
// exactly the face's size and hashes to its name; only then it fsyncs the file, renames it
// to "<sha256 hex>.<size>" and fsyncs the directory. A bytes.Reader is written from its
// own slice, so the face is not copied on the way. Put costs two fsyncs and the face's
// bytes (docs/benchmarks.md, "Face store"). A Put of a face the store holds writes
// nothing; concurrent Puts of one face write it once.
//
// # Crashes
//
// A crash (SIGKILL, power cut) in the middle of a Put leaves its temporary file, or, once
// renamed, the complete verified face; Open removes temporary files. Open rebuilds the
// index from the directory and checks each face's size against its name, so a file a
// power cut truncated is found without reading it: it is removed and listed in Recovery
// (and the log). With Options.VerifyOnOpen it hashes every face as well.
//
// # Removing faces: the invariant
//
// A face is removed only by Sweep (and, when damaged, by Open and Verify); a crash never
// removes one. Sweep removes a face when inUse does not claim it, no Pin holds it, and it
// was not put, held or released since the sweep's Mark. Its caller takes the Mark, then
// reads the durable desired state and claims every face a desired person refers to. The
// intake holds a task's faces in a Pin from before the task's desired-state change until
// after the change is durable. Then a face a durable desired person refers to is never
// removed:
//
//   - the sweep's reading saw the reference, so inUse claims the face; or
//   - it did not, so the change became durable after the reading began, hence after the
//     Mark: the task's Pin still holds the face, or released it after the Mark, which
//     marked it as used since then.
//
// A face the desired state stops referring to stays until a sweep after that change; a
// crash in between leaves it for the next sweep. The caller sweeps after desired-state
// changes that drop faces and once after start: a Sweeper does that, one sweep at start
// and one per burst of changes (Changed, coalesced for SweeperOptions.Delay), sleeping in
// between; a sweep whose reading of the desired state fails removes nothing and is tried
// again on the next change, or a minute later.
//
// # Budget
//
// Options.MaxBytes ([faces] max_bytes) bounds the disk the faces take, each counted as its
// size rounded up to whole 4 KiB blocks (BlockSize): a Put that would pass it fails with
// ErrBudget, whose text names the key; the intake dead-letters the task with it. Puts in
// progress count from their start. A budget lowered below what is held refuses Puts until
// sweeps free enough. The index in memory takes about 100 bytes a face, so the budget
// bounds it too (at most MaxBytes/4096 faces).
//
// # Metrics
//
// faceagent_faces and faceagent_faces_bytes (held), faceagent_faces_puts_total,
// faceagent_faces_hash_failures_total, faceagent_faces_removed_total{reason}
// (unreferenced, damaged): see NewMetrics.
//
// # Caveats
//
//   - Open checks sizes, not contents: a face whose bytes the disk changed in place is
//     found by Verify (call it when a terminal reports a face failing its hash check), or
//     by Open with VerifyOnOpen, which reads every face.
//   - One directory, one file a face: ext4 and F2FS index large directories, so tens of
//     thousands of faces are fine.
//   - The directory is locked with flock(2) while open: a second Open, in this process or
//     another on the same host, fails with ErrLocked.
//   - Durability is the filesystem's: fsync on a device that lies about flushes is not
//     durable.
package faces
