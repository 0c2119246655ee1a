package journal

import (
	"math"
	"strconv"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"
)

// The records of update_task, which the journal writes hundreds of times a second under the
// run's lock, have one shape: tasks that kept their worker (cores), no SPSA state. appendCoreRecord
// writes that shape directly, in the bytes the reflecting encoder would produce for it (the
// test compares them), in a fifth of its time; every other record goes through reflectRecord.

// appendCoreRecord appends rec as storedRecord's bytes and reports true, if rec has the shape
// above; otherwise it returns dst as it was and false.
func appendCoreRecord(dst []byte, rec *journalRecord) ([]byte, bool) {
	if !coreShaped(rec) {
		return dst, false
	}
	return appendCoreShaped(dst, rec), true
}

// appendCoreShaped is appendCoreRecord of a record known to have the shape (coreShaped).
func appendCoreShaped(dst []byte, rec *journalRecord) []byte {
	outer, dst := bsoncore.AppendDocumentStart(dst)
	dst = appendPosition(dst, rec)
	// The record itself, as a binary value (see storedRecord): its length first, then the
	// subtype, then the document.
	dst = bsoncore.AppendHeader(dst, bsoncore.TypeBinary, "record")
	lenAt := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0x00)
	inner, dst := bsoncore.AppendDocumentStart(dst)
	dst = appendPosition(dst, rec)
	arr, dst := bsoncore.AppendArrayElementStart(dst, "tasks")
	for i, t := range rec.Tasks {
		var doc int32
		doc, dst = bsoncore.AppendDocumentElementStart(dst, strconv.Itoa(i))
		dst = appendInt(dst, "i", t.Index)
		dst = appendCore(dst, t.Core)
		dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	}
	dst, _ = bsoncore.AppendArrayEnd(dst, arr)
	dst = bsoncore.AppendDateTimeElement(dst, "last_updated", rec.LastUpdated.UnixMilli())
	dst, _ = bsoncore.AppendDocumentEnd(dst, inner)
	n := len(dst) - int(inner)
	dst[lenAt], dst[lenAt+1], dst[lenAt+2], dst[lenAt+3] = byte(n), byte(n>>8), byte(n>>16), byte(n>>24)
	dst, _ = bsoncore.AppendDocumentEnd(dst, outer)
	return dst
}

// coreShaped reports whether rec has the shape appendCoreRecord writes.
func coreShaped(rec *journalRecord) bool {
	if rec.SPSA != nil || len(rec.Tasks) == 0 {
		return false
	}
	for _, t := range rec.Tasks {
		if c := t.Core; t.Task != nil || c == nil || c.SPSAParams != nil ||
			(c.Residual != nil && math.IsInf(*c.Residual, 0)) {
			return false
		}
	}
	return true
}

func appendPosition(dst []byte, rec *journalRecord) []byte {
	dst = bsoncore.AppendObjectIDElement(dst, "run", rec.Run)
	dst = bsoncore.AppendInt64Element(dst, "epoch", rec.Epoch)
	return bsoncore.AppendInt64Element(dst, "seq", rec.Seq)
}

func appendCore(dst []byte, c *taskCore) []byte {
	doc, dst := bsoncore.AppendDocumentElementStart(dst, "core")
	dst = appendInt(dst, "num_games", c.NumGames)
	dst = bsoncore.AppendBooleanElement(dst, "active", c.Active)
	dst = bsoncore.AppendDateTimeElement(dst, "last_updated", c.LastUpdated.UnixMilli())
	dst = appendInt(dst, "start", c.Start)
	stats, dst := bsoncore.AppendDocumentElementStart(dst, "stats")
	dst = appendInt(dst, "wins", c.Stats.Wins)
	dst = appendInt(dst, "losses", c.Stats.Losses)
	dst = appendInt(dst, "draws", c.Stats.Draws)
	dst = appendInt(dst, "crashes", c.Stats.Crashes)
	dst = appendInt(dst, "time_losses", c.Stats.TimeLosses)
	if len(c.Stats.Pentanomial) > 0 {
		var penta int32
		penta, dst = bsoncore.AppendArrayElementStart(dst, "pentanomial")
		for i, v := range c.Stats.Pentanomial {
			dst = appendInt(dst, strconv.Itoa(i), v)
		}
		dst, _ = bsoncore.AppendArrayEnd(dst, penta)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, stats)
	if c.Bad {
		dst = bsoncore.AppendBooleanElement(dst, "bad", true)
	}
	if c.TaskID != nil {
		dst = appendInt(dst, "task_id", *c.TaskID)
	}
	if c.Residual != nil {
		dst = bsoncore.AppendDoubleElement(dst, "residual", *c.Residual)
	}
	if c.ResidualColor != "" {
		dst = bsoncore.AppendStringElement(dst, "residual_color", c.ResidualColor)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	return dst
}

// appendInt appends a Go int as the driver does: an int32 where it fits, else an int64.
func appendInt(dst []byte, key string, v int) []byte {
	if v >= math.MinInt32 && v <= math.MaxInt32 {
		return bsoncore.AppendInt32Element(dst, key, int32(v))
	}
	return bsoncore.AppendInt64Element(dst, key, int64(v))
}
