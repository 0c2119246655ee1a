package rundb

import (
	"math"
	"reflect"
	"testing"

	"go.mongodb.org/mongo-driver/v2/bson"
)

// Both stored forms of a run (MongoDB's, with nested arrays and infinities, and FerretDB's,
// without) must decode to the same run.
func TestRunEncodingsDecodeAlike(t *testing.T) {
	want := &Run{
		ID: NewObjectID(),
		Args: RunArgs{SPSA: &SPSA{Params: []SPSAParam{{Name: "A", Theta: 1}, {Name: "B", Theta: 2}},
			ParamHistory: ParamHistory{
				{{Theta: 1, R: 0.1, C: 3}, {Theta: 2, R: 0.2, C: 4}},
				{{Theta: 1.5, R: 0.1, C: 3}, {Theta: 2.5, R: 0.2, C: 4}},
			}}},
		BadTasks: []Task{{Residual: ptr(math.Inf(1)), ResidualColor: "red"}, {Residual: ptr(-1.5)}},
	}
	for _, flat := range []bool{false, true} {
		s := &RunStore{flatHistory: flat}
		doc, err := s.encode(want)
		if err != nil {
			t.Fatalf("flat=%v: encode: %v", flat, err)
		}
		history := bson.Raw(doc).Lookup("args", "spsa", "param_history", "0")
		wantType := bson.TypeArray
		if flat {
			wantType = bson.TypeEmbeddedDocument
		}
		if history.Type != wantType {
			t.Errorf("flat=%v: a history row is stored as %v, want %v", flat, history.Type, wantType)
		}
		residual := bson.Raw(doc).Lookup("bad_tasks", "0", "residual").Double()
		if math.IsInf(residual, 1) == flat {
			t.Errorf("flat=%v: +Inf residual stored as %v", flat, residual)
		}
		got, err := s.decode(doc)
		if err != nil {
			t.Fatalf("flat=%v: decode: %v", flat, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("flat=%v: decoded\n%+v\nwant\n%+v", flat, got.Args.SPSA, want.Args.SPSA)
		}
	}
}

func ptr[T any](v T) *T { return &v }

func TestParseObjectID(t *testing.T) {
	id := NewObjectID()
	got, err := ParseObjectID(id.Hex())
	if err != nil || got != id {
		t.Fatalf("ParseObjectID(%s) = %v, %v", id.Hex(), got, err)
	}
	for _, bad := range []string{"", "123", "zz02abe9707638b5fd2b68ca", id.Hex() + "0"} {
		if _, err := ParseObjectID(bad); err == nil {
			t.Errorf("ParseObjectID(%q) accepted", bad)
		}
	}
	b, err := id.MarshalJSON()
	if err != nil || string(b) != `"`+id.Hex()+`"` {
		t.Errorf("JSON of an ObjectID = %s, %v", b, err)
	}
}
