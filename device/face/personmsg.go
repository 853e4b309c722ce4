package face

import "github.com/tinylib/msgp/msgp"

// MarshalMsg implements msgp.Marshaler.
//
// A v1 person (no Rev) is written with every v1 field, empty ones too: those are the bytes
// v1 terminals were built against (docs/protocol.md "msgp encoding"). A v2 person (with a
// Rev) leaves an empty name, validFrom and validTo out, as its JSON does: a v2 terminal
// reads an absent field as empty, and on a serial line each empty field costs 6 to 11
// bytes a person, about 2% of a person with a 1 KiB template.
func (z *Person) MarshalMsg(b []byte) ([]byte, error) {
	o := msgp.Require(b, z.Msgsize())
	v2 := z.Rev != ""
	n := uint32(1)
	for _, s := range [...]string{z.Name, z.ValidFrom, z.ValidTo} {
		if s != "" || !v2 {
			n++
		}
	}
	if v2 {
		n++
	}
	face := !z.Face.IsZero()
	if face {
		n++
	}
	o = msgp.AppendMapHeader(o, n)
	o = msgp.AppendString(o, "id")
	o = msgp.AppendString(o, z.ID)
	for _, f := range [...]struct{ key, val string }{{"name", z.Name}, {"validFrom", z.ValidFrom}, {"validTo", z.ValidTo}} {
		if f.val != "" || !v2 {
			o = msgp.AppendString(o, f.key)
			o = msgp.AppendString(o, f.val)
		}
	}
	if v2 {
		o = msgp.AppendString(o, "rev")
		o = msgp.AppendString(o, z.Rev)
	}
	if face {
		o = msgp.AppendString(o, "face")
		var err error
		if o, err = z.Face.MarshalMsg(o); err != nil {
			return o, msgp.WrapError(err, "Face")
		}
	}
	return o, nil
}

// Msgsize implements msgp.Sizer: an upper bound on the size of MarshalMsg's encoding.
func (z *Person) Msgsize() int {
	return 1 + 3 + msgp.StringPrefixSize + len(z.ID) + 5 + msgp.StringPrefixSize + len(z.Name) +
		10 + msgp.StringPrefixSize + len(z.ValidFrom) + 8 + msgp.StringPrefixSize + len(z.ValidTo) +
		4 + msgp.StringPrefixSize + len(z.Rev) + 5 + z.Face.Msgsize()
}
