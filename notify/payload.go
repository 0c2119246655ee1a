package notify

import (
	"encoding/json"
	"fmt"
	"mime"
	"strings"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// Text is the one-line message of a delivery, as chat webhooks and the e-mail's subject show it.
func Text(e *rundb.OutboxEntry) string {
	var s string
	switch e.Kind {
	case KindFinished:
		s = fmt.Sprintf("Test finished: %s", e.Run)
	case KindApproved:
		s = fmt.Sprintf("Test approved: %s", e.Run)
	case KindStopped:
		s = fmt.Sprintf("Test stopped: %s", e.Run)
	case KindQuarantined:
		s = fmt.Sprintf("Machine quarantined: %s", e.Worker)
	default:
		s = e.Kind
	}
	if e.Message != "" {
		s += " - " + e.Message
	}
	return oneLine(s)
}

// jsonPayload is the plain JSON payload: the event's fields, and its text.
type jsonPayload struct {
	Event    string    `json:"event"`
	Username string    `json:"username"`
	RunID    string    `json:"run_id,omitempty"`
	Run      string    `json:"run,omitempty"`
	Worker   string    `json:"worker,omitempty"`
	Message  string    `json:"message,omitempty"`
	Text     string    `json:"text"`
	Time     time.Time `json:"time"`
}

// Payload is the body posted to a webhook, in the shape its format asks for.
func Payload(e *rundb.OutboxEntry) ([]byte, error) {
	switch e.Format {
	case FormatDiscord:
		return json.Marshal(map[string]string{"content": Text(e)})
	case FormatSlack:
		return json.Marshal(map[string]string{"text": Text(e)})
	default:
		return json.Marshal(jsonPayload{Event: e.Kind, Username: e.Username, RunID: e.RunID, Run: e.Run,
			Worker: e.Worker, Message: e.Message, Text: Text(e), Time: e.Created.UTC()})
	}
}

// oneLine removes line breaks, which would end a mail header early.
func oneLine(s string) string {
	return strings.NewReplacer("\r", " ", "\n", " ").Replace(s)
}

// mailMessage is the whole e-mail of a delivery: headers and a plain-text body.
func mailMessage(from string, e *rundb.OutboxEntry, now time.Time) []byte {
	var b strings.Builder
	fmt.Fprintf(&b, "From: %s\r\n", oneLine(from))
	fmt.Fprintf(&b, "To: %s\r\n", oneLine(e.Target))
	fmt.Fprintf(&b, "Subject: %s\r\n", mime.QEncoding.Encode("utf-8", oneLine("[Shoal] "+Text(e))))
	fmt.Fprintf(&b, "Date: %s\r\n", now.UTC().Format(time.RFC1123Z))
	b.WriteString("MIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\nContent-Transfer-Encoding: 8bit\r\n\r\n")
	b.WriteString(Text(e) + "\r\n\r\n")
	if e.RunID != "" {
		fmt.Fprintf(&b, "Run: %s (%s)\r\n", oneLine(e.Run), oneLine(e.RunID))
	}
	if e.Worker != "" {
		fmt.Fprintf(&b, "Machine: %s\r\n", oneLine(e.Worker))
	}
	fmt.Fprintf(&b, "\r\nYou get this because you chose, on your Shoal profile, to hear of: %s.\r\n", KindLabel(e.Kind))
	return []byte(b.String())
}
