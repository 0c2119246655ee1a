package live

import (
	"strings"
	"testing"
)

func TestUILiveWriteEvent(t *testing.T) {
	var b strings.Builder
	if err := writeEvent(&b, "update", "<div id=\"a\">\none\r\ntwo\rthree</div>"); err != nil {
		t.Fatal(err)
	}
	want := "event: update\ndata: <div id=\"a\">\ndata: one\ndata: two\ndata: three</div>\n\n"
	if b.String() != want {
		t.Errorf("event = %q, want %q", b.String(), want)
	}
	if data := eventData(b.String()); data != "<div id=\"a\">\none\ntwo\nthree</div>" {
		t.Errorf("read back as %q", data)
	}
}

// eventData is the data of the first event of a stream, its data lines joined as a browser's
// EventSource joins them.
func eventData(stream string) string {
	var data []string
	for line := range strings.SplitSeq(stream, "\n") {
		if line == "" {
			break
		}
		if d, ok := strings.CutPrefix(line, "data: "); ok {
			data = append(data, d)
		}
	}
	return strings.Join(data, "\n")
}
