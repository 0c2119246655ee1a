package rundb

import (
	"bytes"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"sync/atomic"
	"time"
)

// ObjectID is a MongoDB ObjectId: 4 bytes of Unix seconds, 5 random bytes and a 3-byte counter.
// It stores as a BSON ObjectId, so documents written by fishtest open unchanged, and it prints
// and marshals to JSON as 24 lower-case hex digits, the form the worker protocol uses for run_id.
type ObjectID [12]byte

// objectIDProcess and objectIDCounter make IDs created in this process unique, as MongoDB's
// drivers do; both are fixed for the life of the process.
var (
	objectIDProcess = func() (p [5]byte) {
		if _, err := rand.Read(p[:]); err != nil {
			panic(fmt.Sprintf("rundb: no randomness for ObjectIDs: %v", err))
		}
		return p
	}()
	objectIDCounter = func() *atomic.Uint32 {
		var c atomic.Uint32
		var b [4]byte
		_, _ = rand.Read(b[:])
		c.Store(binary.BigEndian.Uint32(b[:]))
		return &c
	}()
)

// NewObjectID returns a new ObjectID stamped with the current time.
func NewObjectID() ObjectID {
	var id ObjectID
	binary.BigEndian.PutUint32(id[0:4], uint32(time.Now().Unix()))
	copy(id[4:9], objectIDProcess[:])
	c := objectIDCounter.Add(1)
	id[9], id[10], id[11] = byte(c>>16), byte(c>>8), byte(c)
	return id
}

// ParseObjectID parses 24 hex digits. It is the check fishtest calls ObjectId.is_valid for
// strings.
func ParseObjectID(s string) (ObjectID, error) {
	var id ObjectID
	if len(s) != 24 {
		return id, fmt.Errorf("invalid ObjectId %q: want 24 hex digits", s)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return ObjectID{}, fmt.Errorf("invalid ObjectId %q: want 24 hex digits", s)
	}
	return id, nil
}

// Hex returns the 24 hex digits of id.
func (id ObjectID) Hex() string { return hex.EncodeToString(id[:]) }

// String returns the 24 hex digits of id.
func (id ObjectID) String() string { return id.Hex() }

// Compare orders IDs by their bytes (creation time first): -1, 0 or +1, for slices.SortFunc.
func (id ObjectID) Compare(other ObjectID) int { return bytes.Compare(id[:], other[:]) }

// IsZero reports whether id is the zero value (no ID assigned yet).
func (id ObjectID) IsZero() bool { return id == ObjectID{} }

// Time returns the creation time encoded in id.
func (id ObjectID) Time() time.Time {
	return time.Unix(int64(binary.BigEndian.Uint32(id[0:4])), 0).UTC()
}

// bsonTypeObjectID is the BSON element type of an ObjectId.
const bsonTypeObjectID = 0x07

// MarshalBSONValue stores id as a BSON ObjectId.
func (id ObjectID) MarshalBSONValue() (byte, []byte, error) {
	b := id
	return bsonTypeObjectID, b[:], nil
}

// UnmarshalBSONValue reads a BSON ObjectId.
func (id *ObjectID) UnmarshalBSONValue(typ byte, data []byte) error {
	if typ != bsonTypeObjectID || len(data) != len(id) {
		return fmt.Errorf("rundb: cannot decode BSON type %#x into an ObjectID", typ)
	}
	copy(id[:], data)
	return nil
}

// MarshalJSON writes id as a JSON string of 24 hex digits.
func (id ObjectID) MarshalJSON() ([]byte, error) { return json.Marshal(id.Hex()) }

// UnmarshalJSON reads a JSON string of 24 hex digits.
func (id *ObjectID) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	parsed, err := ParseObjectID(s)
	if err != nil {
		return err
	}
	*id = parsed
	return nil
}
