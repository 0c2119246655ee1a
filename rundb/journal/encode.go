package journal

import (
	"math"
	"strconv"
	"time"

	"go.mongodb.org/mongo-driver/v2/x/bsonx/bsoncore"

	"github.com/shoal-chess/shoal/rundb"
)

// The records of update_task, which the journal writes hundreds of times a second under the
// run's lock, have one shape: tasks that kept their worker (cores), no SPSA state. appendCoreRecord
// writes that shape directly, in the bytes the reflecting encoder would produce for it (the
// test compares them), in a fifth of its time. request_task's records hold its new task whole,
// worker_info and all, and an SPSA run's state: appendShaped writes those too (plainShaped),
// where the driver's encoder allocated some 5 kB a record. Every other record (fields Shoal does
// not know, history rows, infinities) goes through reflectRecord.

// appendCoreRecord appends rec as storedRecord's bytes and reports true, if rec has the shape
// above; otherwise it returns dst as it was and false.
func appendCoreRecord(dst []byte, rec *journalRecord) ([]byte, bool) {
	if !coreShaped(rec) {
		return dst, false
	}
	return appendShaped(dst, rec), true
}

// appendShaped appends rec as storedRecord's bytes, rec being known to have a shape it writes
// (plainShaped): the bytes reflectRecord gives.
func appendShaped(dst []byte, rec *journalRecord) []byte {
	outer, dst := bsoncore.AppendDocumentStart(dst)
	dst = appendPosition(dst, rec)
	// The record itself, as a binary value (see storedRecord): its length first, then the
	// subtype, then the document.
	dst = bsoncore.AppendHeader(dst, bsoncore.TypeBinary, "record")
	lenAt := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0x00)
	inner, dst := bsoncore.AppendDocumentStart(dst)
	dst = appendPosition(dst, rec)
	if rec.Tasks == nil { // as the driver writes a nil slice
		dst = bsoncore.AppendNullElement(dst, "tasks")
	} else {
		var arr int32
		arr, dst = bsoncore.AppendArrayElementStart(dst, "tasks")
		for i, t := range rec.Tasks {
			var doc int32
			doc, dst = bsoncore.AppendDocumentStart(appendIndexedHeader(dst, bsoncore.TypeEmbeddedDocument, i))
			dst = appendInt(dst, "i", t.Index)
			if t.Task != nil {
				dst = appendTask(dst, t.Task)
			}
			if t.Core != nil {
				dst = appendCore(dst, t.Core)
			}
			dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
		}
		dst, _ = bsoncore.AppendArrayEnd(dst, arr)
	}
	if rec.SPSA != nil {
		dst = appendSPSA(dst, rec.SPSA)
	}
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
		if c := t.Core; t.Task != nil || c == nil || c.SPSAParams != nil || infinite(c.Residual) {
			return false
		}
	}
	return true
}

// plainShaped reports whether appendShaped writes rec: its tasks have no fields Shoal does not
// know (Extra, an inline map, is written in the map's random order), no value is infinite (the
// embedded database's codec rewrites infinities) and its SPSA state adds no history rows (the
// codecs write rows differently).
func plainShaped(rec *journalRecord) bool {
	for _, t := range rec.Tasks {
		if c := t.Core; c != nil && infinite(c.Residual) {
			return false
		}
		if w := t.Task; w != nil && (len(w.Extra) > 0 || len(w.WorkerInfo.Extra) > 0 || infinite(w.Residual) ||
			math.IsInf(w.WorkerInfo.NPS, 0)) {
			return false
		}
	}
	if s := rec.SPSA; s != nil {
		if len(s.History) > 0 {
			return false
		}
		for _, theta := range s.Theta {
			if math.IsInf(theta, 0) {
				return false
			}
		}
	}
	return true
}

func infinite(f *float64) bool { return f != nil && math.IsInf(*f, 0) }

func appendPosition(dst []byte, rec *journalRecord) []byte {
	dst = bsoncore.AppendObjectIDElement(dst, "run", rec.Run)
	dst = bsoncore.AppendInt64Element(dst, "epoch", rec.Epoch)
	return bsoncore.AppendInt64Element(dst, "seq", rec.Seq)
}

func appendCore(dst []byte, c *taskCore) []byte {
	doc, dst := bsoncore.AppendDocumentElementStart(dst, "core")
	dst = appendTaskHead(dst, c.NumGames, c.Active, c.LastUpdated, c.Start, &c.Stats)
	dst = appendTaskTail(dst, c.Bad, c.SPSAParams, c.TaskID, c.Residual, c.ResidualColor)
	dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	return dst
}

// appendTask appends t as a record's whole task: a core's fields with worker_info among them,
// in rundb.Task's order. t has no Extra (plainShaped).
func appendTask(dst []byte, t *rundb.Task) []byte {
	doc, dst := bsoncore.AppendDocumentElementStart(dst, "task")
	dst = appendTaskHead(dst, t.NumGames, t.Active, t.LastUpdated, t.Start, &t.Stats)
	dst = appendWorkerInfo(dst, &t.WorkerInfo)
	dst = appendTaskTail(dst, t.Bad, t.SPSAParams, t.TaskID, t.Residual, t.ResidualColor)
	dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	return dst
}

// appendTaskHead appends the fields a task and its core begin with.
func appendTaskHead(dst []byte, numGames int, active bool, lastUpdated time.Time, start int, stats *rundb.Results) []byte {
	dst = appendInt(dst, "num_games", numGames)
	dst = bsoncore.AppendBooleanElement(dst, "active", active)
	dst = bsoncore.AppendDateTimeElement(dst, "last_updated", lastUpdated.UnixMilli())
	dst = appendInt(dst, "start", start)
	doc, dst := bsoncore.AppendDocumentElementStart(dst, "stats")
	dst = appendInt(dst, "wins", stats.Wins)
	dst = appendInt(dst, "losses", stats.Losses)
	dst = appendInt(dst, "draws", stats.Draws)
	dst = appendInt(dst, "crashes", stats.Crashes)
	dst = appendInt(dst, "time_losses", stats.TimeLosses)
	if len(stats.Pentanomial) > 0 { // omitempty
		dst = appendInts(dst, "pentanomial", stats.Pentanomial)
	}
	dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	return dst
}

// appendTaskTail appends the optional fields a task and its core end with (all omitempty).
func appendTaskTail(dst []byte, bad bool, spsa *rundb.SPSAParams, taskID *int, residual *float64, color string) []byte {
	if bad {
		dst = bsoncore.AppendBooleanElement(dst, "bad", true)
	}
	if spsa != nil {
		var doc int32
		doc, dst = bsoncore.AppendDocumentElementStart(dst, "spsa_params")
		dst = appendInt(dst, "iter", spsa.Iter)
		if spsa.PackedFlips == nil {
			dst = bsoncore.AppendNullElement(dst, "packed_flips")
		} else {
			dst = bsoncore.AppendBinaryElement(dst, "packed_flips", 0x00, spsa.PackedFlips)
		}
		dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	}
	if taskID != nil {
		dst = appendInt(dst, "task_id", *taskID)
	}
	if residual != nil {
		dst = bsoncore.AppendDoubleElement(dst, "residual", *residual)
	}
	if color != "" {
		dst = bsoncore.AppendStringElement(dst, "residual_color", color)
	}
	return dst
}

// appendWorkerInfo appends w, which has no Extra (plainShaped), in rundb.WorkerInfo's order.
func appendWorkerInfo(dst []byte, w *rundb.WorkerInfo) []byte {
	doc, dst := bsoncore.AppendDocumentElementStart(dst, "worker_info")
	dst = bsoncore.AppendStringElement(dst, "uname", w.Uname)
	dst = appendStrings(dst, "architecture", w.Architecture)
	dst = appendInt(dst, "concurrency", w.Concurrency)
	dst = appendInt(dst, "max_memory", w.MaxMemory)
	dst = appendInt(dst, "min_threads", w.MinThreads)
	dst = bsoncore.AppendStringElement(dst, "username", w.Username)
	dst = appendInt(dst, "version", w.Version)
	dst = appendInts(dst, "python_version", w.PythonVersion)
	dst = appendInts(dst, "gcc_version", w.GCCVersion)
	dst = bsoncore.AppendStringElement(dst, "compiler", w.Compiler)
	dst = bsoncore.AppendStringElement(dst, "unique_key", w.UniqueKey)
	dst = bsoncore.AppendBooleanElement(dst, "modified", w.Modified)
	dst = bsoncore.AppendStringElement(dst, "worker_arch", w.WorkerArch)
	dst = bsoncore.AppendStringElement(dst, "ARCH", w.ARCH)
	dst = bsoncore.AppendDoubleElement(dst, "nps", w.NPS)
	dst = bsoncore.AppendBooleanElement(dst, "near_github_api_limit", w.NearGithubAPILimit)
	dst = bsoncore.AppendStringElement(dst, "remote_addr", w.RemoteAddr)
	dst = bsoncore.AppendStringElement(dst, "country_code", w.CountryCode)
	dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	return dst
}

// appendSPSA appends s, which has no history rows (plainShaped): history is omitempty.
func appendSPSA(dst []byte, s *journalSPSA) []byte {
	doc, dst := bsoncore.AppendDocumentElementStart(dst, "spsa")
	dst = appendInt(dst, "iter", s.Iter)
	dst = appendArray(dst, "theta", s.Theta, typeOf[float64](bsoncore.TypeDouble), bsoncore.AppendDouble)
	dst = appendInt(dst, "history_from", s.HistoryFrom)
	dst, _ = bsoncore.AppendDocumentEnd(dst, doc)
	return dst
}

// appendInts appends vs as the driver does a []int.
func appendInts(dst []byte, key string, vs []int) []byte {
	return appendArray(dst, key, vs, intType, appendIntValue)
}

// appendStrings appends vs as the driver does a []string.
func appendStrings(dst []byte, key string, vs []string) []byte {
	return appendArray(dst, key, vs, typeOf[string](bsoncore.TypeString), bsoncore.AppendString)
}

// appendArray appends vs as the driver writes a slice: null if nil, else an array whose
// element i is vs[i], of type elemType(vs[i]), its value's bytes appended by appendValue.
func appendArray[T any](dst []byte, key string, vs []T, elemType func(T) bsoncore.Type, appendValue func([]byte, T) []byte) []byte {
	if vs == nil {
		return bsoncore.AppendNullElement(dst, key)
	}
	arr, dst := bsoncore.AppendArrayElementStart(dst, key)
	for i, v := range vs {
		dst = appendValue(appendIndexedHeader(dst, elemType(v), i), v)
	}
	dst, _ = bsoncore.AppendArrayEnd(dst, arr)
	return dst
}

// typeOf is an elemType for appendArray whose elements all have type t.
func typeOf[T any](t bsoncore.Type) func(T) bsoncore.Type {
	return func(T) bsoncore.Type { return t }
}

// appendIndexedHeader appends the header of an array's element i, whose key is i in decimal,
// without making the key's string.
func appendIndexedHeader(dst []byte, t bsoncore.Type, i int) []byte {
	dst = append(dst, byte(t))
	dst = strconv.AppendInt(dst, int64(i), 10)
	return append(dst, 0)
}

// appendInt appends a Go int as the driver does: an int32 where it fits, else an int64.
func appendInt(dst []byte, key string, v int) []byte {
	return appendIntValue(bsoncore.AppendHeader(dst, intType(v), key), v)
}

// intType is the type the driver writes a Go int as: int32 where it fits, else int64.
func intType(v int) bsoncore.Type {
	if v >= math.MinInt32 && v <= math.MaxInt32 {
		return bsoncore.TypeInt32
	}
	return bsoncore.TypeInt64
}

// appendIntValue appends v's bytes in intType(v).
func appendIntValue(dst []byte, v int) []byte {
	if intType(v) == bsoncore.TypeInt32 {
		return bsoncore.AppendInt32(dst, int32(v))
	}
	return bsoncore.AppendInt64(dst, int64(v))
}
