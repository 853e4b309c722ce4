package whitelist

// Faces returns the SHA-256 (raw) of every face a record of the desired state refers to,
// excluded persons' records included (an Include brings them back with their face), and
// returns once the state it read is durable: a face missing from the set is referred to
// by no record the journal holds, nor by any update applied before the call. The error is
// Flush's: the set is then not to be trusted (a face sweep must not use it). Updates
// applied after the call are not in the set: the face store's pins and marks cover them.
func (s *Store) Faces() (map[[faceLen]byte]struct{}, error) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil, ErrClosed
	}
	set := make(map[[faceLen]byte]struct{})
	for i := range s.st.recs {
		r := &s.st.recs[i]
		if r.data == "" {
			continue // a free slot
		}
		if sum, ok := fieldsFace(r.data); ok {
			set[sum] = struct{}{}
		}
	}
	seq := s.last
	s.mu.Unlock()
	if seq == 0 {
		return set, nil
	}
	if err := s.j.Wait(seq); err != nil {
		return nil, err
	}
	return set, nil
}
