package rundb

import (
	"go.mongodb.org/mongo-driver/v2/bson"
)

// An Encoder encodes documents exactly as its Codec's Encode does, into buffers it keeps for
// the next encoding. A run document runs to hundreds of kilobytes: encoded afresh, its buffer
// grows step by step from nothing and the result is copied out once more; encoded again by an
// Encoder that has held a document as large, its bytes cost no allocation. The run cache
// writes runs with pooled Encoders.
//
// Not safe for concurrent use. The bytes Encode returns are the Encoder's: valid until its
// next Encode, so a caller finishes with them (the write that sends them has returned) before
// encoding again or handing the Encoder to another goroutine.
type Encoder struct {
	reg *bson.Registry
	// vw holds the document as the bson encoder builds it, and keeps its buffer's capacity
	// from one document to the next; enc writes to it. Both nil until the first Encode and
	// after a failed one, which can leave vw in the middle of a document.
	vw  bson.ValueWriter
	enc *bson.Encoder
	// out receives the finished document from vw, which empties its own buffer once it has
	// written a whole document out.
	out docBuffer
}

// NewEncoder returns an Encoder of c's form.
func (c Codec) NewEncoder() *Encoder {
	if c.flat {
		return &Encoder{reg: ferretRegistry}
	}
	return &Encoder{}
}

// Encode encodes v as Codec.Encode does. The result is valid until the next Encode.
func (e *Encoder) Encode(v any) ([]byte, error) {
	if e.enc == nil {
		e.vw = bson.NewDocumentWriter(&e.out)
		e.enc = bson.NewEncoder(e.vw) // the default registry, as bson.Marshal's
		if e.reg != nil {
			e.enc.SetRegistry(e.reg)
		}
	}
	e.out.b = e.out.b[:0]
	if err := e.enc.Encode(v); err != nil {
		e.vw, e.enc = nil, nil
		return nil, err
	}
	return e.out.b, nil
}

// docBuffer is the io.Writer an Encoder's value writer hands each finished document to; it
// copies the document into a slice it reuses.
type docBuffer struct{ b []byte }

func (d *docBuffer) Write(p []byte) (int, error) {
	d.b = append(d.b, p...)
	return len(p), nil
}
