// Package dirlock keeps a directory to one owner: the journals and the face store each take
// an exclusive lock on a file in their directory when they open it.
//
//	f, err := dirlock.Lock(filepath.Join(dir, "LOCK"))
//	if errors.Is(err, dirlock.ErrLocked) { … another Open holds dir … }
//	defer f.Close() // closing the file releases the lock
//
// What holds: the lock is an flock on the open file description, so a second Lock of the
// same path is refused in this process as well as in another; the kernel drops it when the
// process dies, so a crash never leaves a directory locked.
package dirlock
