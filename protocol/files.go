package protocol

import (
	"bytes"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"hash"
	"regexp"
)

// The files a worker that builds its engines gets from the server, never from a forge:
//
//   - POST SourcePath with a SourceRequest (the worker's credentials, as every worker call):
//     the git archive of one commit of an active run, a gzipped tarball with the repository's
//     tree at its root (src/ holds Stockfish's sources), its sha256 in SourceSHA256Header. A
//     commit that is no active run's is a 404 in the worker API's error shape.
//   - GET /api/nn/{name}: a network, which a worker checks against the hash in its name
//     (NetNameMatches); the server may redirect to the operator's nn_url.
//   - GET BooksPath + {name}: an opening book the server holds, which a worker checks against
//     the run's book_sri (BookSRI).
const (
	SourcePath         = "/api/source"
	SourceSHA256Header = "X-Shoal-Sha256"
	BooksPath          = "/api/books/"
)

// BuildFailedPrefix starts the failed_task message of a worker whose build of a run's commit
// failed: the short commit, the build command and its exit status, a newline and the last lines
// of the build's log. The server shows the log on the run's page and stops a run that three
// different workers failed to build.
const BuildFailedPrefix = "Build failed: "

// SourceRequest is the body of POST SourcePath.
type SourceRequest struct {
	Password   string     `json:"password"`
	WorkerInfo WorkerInfo `json:"worker_info"`
	// SHA is the full commit, 40 lower-case hex digits.
	SHA string `json:"sha"`
}

// SHA256Hex is the lower-case hex sha256 of data, as SourceSHA256Header carries it.
func SHA256Hex(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

// BookSRI is the checksum of an opening book as fishtest's books.json gives it (its "sri") and
// fishtest's worker computes it: the base64 of the SHA-384 of the book read as text, so with
// every "\r\n" and lone "\r" read as "\n".
func BookSRI(data []byte) string {
	h := NewBookHash()
	h.Write(data)
	return h.SRI()
}

// BookHash computes BookSRI of a book written to it in pieces of any size, for a book read as a
// stream. It is not safe for concurrent use.
type BookHash struct {
	h  hash.Hash
	cr bool // the last byte written was a "\r", which the next may join as "\r\n"
}

// NewBookHash returns a BookHash of nothing yet.
func NewBookHash() *BookHash { return &BookHash{h: sha512.New384()} }

var newline = []byte{'\n'}

// Write adds p to the book; it never fails.
func (b *BookHash) Write(p []byte) (int, error) {
	n := len(p)
	if b.cr && len(p) > 0 {
		b.h.Write(newline)
		b.cr = false
		if p[0] == '\n' {
			p = p[1:]
		}
	}
	for len(p) > 0 {
		i := bytes.IndexByte(p, '\r')
		if i < 0 {
			b.h.Write(p)
			break
		}
		b.h.Write(p[:i])
		if i+1 == len(p) {
			b.cr = true
			break
		}
		b.h.Write(newline)
		p = p[i+1:]
		if p[0] == '\n' {
			p = p[1:]
		}
	}
	return n, nil
}

// SRI is the checksum of what was written.
func (b *BookHash) SRI() string {
	if b.cr {
		b.h.Write(newline)
		b.cr = false
	}
	return base64.StdEncoding.EncodeToString(b.h.Sum(nil))
}

// netName is a network's file name: "nn-", the first 12 hex digits of its sha256, ".nnue".
var netName = regexp.MustCompile(`nn-[a-f0-9]{12}\.nnue`)

// ValidNetName reports whether name is a network's file name, nn-<12 hex digits>.nnue.
func ValidNetName(name string) bool {
	return len(name) == len("nn-123456789abc.nnue") && netName.MatchString(name)
}

// NetNameMatches reports whether data is the network name names: its sha256 starts with the 12
// hex digits of the name.
func NetNameMatches(name string, data []byte) bool {
	return ValidNetName(name) && SHA256Hex(data)[:12] == name[3:15]
}

// NetsInSource lists the networks an engine's sources build in, as fishtest reads them: the
// names on the lines of src/evaluate.h that #define an EvalFileDefaultName (one from Stockfish
// 12 to 16, EvalFileDefaultNameBig and ...Small after), else, for older sources, the EvalFile
// option's default in src/ucioption.cpp. Either file may be nil. Each name is listed once.
func NetsInSource(evaluateH, ucioptionCpp []byte) []string {
	nets := netsOnLines(evaluateH, "EvalFileDefaultName", "define")
	if len(nets) == 0 {
		nets = netsOnLines(ucioptionCpp, "EvalFile", "Option")
	}
	return nets
}

// netsOnLines returns the network names on the lines of src that hold both words.
func netsOnLines(src []byte, word1, word2 string) []string {
	var nets []string
	for line := range bytes.Lines(src) {
		if !bytes.Contains(line, []byte(word1)) || !bytes.Contains(line, []byte(word2)) {
			continue
		}
		name := string(netName.Find(line))
		if name == "" {
			continue
		}
		dup := false
		for _, n := range nets {
			dup = dup || n == name
		}
		if !dup {
			nets = append(nets, name)
		}
	}
	return nets
}

var (
	sourceKeys   = [...]string{"password", "worker_info", "sha"}
	sourceKeySet = newKeySet(sourceKeys[:])
)

// sha1Hex is a full commit SHA as a source request names it.
var sha1Hex = regexp.MustCompile(`^[0-9a-f]{40}$`)

// SourceRequest decodes the body of an authenticated POST SourcePath as strictly as every worker
// call: no keys beyond password, worker_info (with all its keys and their constraints) and sha,
// which must be a full commit SHA in lower case. The error is a *ValidationError naming the field.
func (p Body) SourceRequest(legacyUsername func(string) bool) (*SourceRequest, error) {
	d := decoder{b: p.b}
	if err := d.object(p.top, fieldRequest); err != nil {
		return nil, err
	}
	var s [len(sourceKeys)]span
	if key := collect(p.b, p.top, sourceKeySet, s[:]); key.present() {
		return nil, d.unknown(fieldRequest, key)
	}
	r := &SourceRequest{}
	var err error
	if r.Password, err = d.password(s[0]); err != nil {
		return nil, err
	}
	if err := d.required(s[1], fieldRequest, "worker_info"); err != nil {
		return nil, err
	}
	if err := d.workerInfo(s[1], &r.WorkerInfo, legacyUsername); err != nil {
		return nil, err
	}
	if err := d.required(s[2], fieldRequest, "sha"); err != nil {
		return nil, err
	}
	if r.SHA, err = d.str(s[2], "sha"); err != nil {
		return nil, err
	}
	if !sha1Hex.MatchString(r.SHA) {
		return nil, d.invalid("sha", s[2], "is not a full commit SHA (40 lower-case hex digits)")
	}
	return r, nil
}
