package notify

import (
	"errors"
	"fmt"
	"net/mail"
	"net/url"
	"slices"
	"strings"

	"github.com/shoal-chess/shoal/rundb"
)

// The shapes of a webhook's payload.
const (
	FormatJSON    = "json"    // Shoal's own object (see Payload)
	FormatDiscord = "discord" // {"content": "..."}, what a Discord webhook takes
	FormatSlack   = "slack"   // {"text": "..."}, what a Slack (or Mattermost) webhook takes
)

// Formats lists the payload shapes, in the order the profile shows them.
var Formats = []string{FormatJSON, FormatDiscord, FormatSlack}

// Limits on what a user may save.
const (
	MaxWebhooks   = 5
	maxURLLength  = 2048
	maxMailLength = 254
)

// Check validates a user's settings as the profile form sends them and returns them cleaned
// (spaces trimmed, events in order); emailAllowed says whether the operator configured SMTP.
// Its error is meant for the user: it names what is wrong.
func Check(ns rundb.NotifySettings, emailAllowed bool) (rundb.NotifySettings, error) {
	out := rundb.NotifySettings{Username: ns.Username}
	if len(ns.Webhooks) > MaxWebhooks {
		return out, fmt.Errorf("at most %d webhooks", MaxWebhooks)
	}
	for _, w := range ns.Webhooks {
		u := strings.TrimSpace(w.URL)
		if err := CheckWebhookURL(u); err != nil {
			return out, err
		}
		if !slices.Contains(Formats, w.Format) {
			return out, fmt.Errorf("webhook %s: unknown payload %q (json, discord or slack)", u, w.Format)
		}
		out.Webhooks = append(out.Webhooks, rundb.NotifyWebhook{URL: u, Format: w.Format})
	}
	if email := strings.TrimSpace(ns.Email); email != "" {
		if !emailAllowed {
			return out, errors.New("e-mail is not available: the server has no mail settings")
		}
		if err := checkEmail(email); err != nil {
			return out, err
		}
		out.Email = email
	}
	for _, k := range Kinds {
		if slices.Contains(ns.Events, k) {
			out.Events = append(out.Events, k)
		}
	}
	for _, k := range ns.Events {
		if !slices.Contains(Kinds, k) {
			return out, fmt.Errorf("unknown event %q", k)
		}
	}
	return out, nil
}

// CheckWebhookURL accepts an absolute http or https URL with a host and without credentials.
// Where it points is checked when it is dialled, after its name is resolved (see Policy).
func CheckWebhookURL(raw string) error {
	if raw == "" {
		return errors.New("a webhook needs a URL")
	}
	if len(raw) > maxURLLength {
		return fmt.Errorf("webhook URL longer than %d characters", maxURLLength)
	}
	if strings.ContainsAny(raw, " \t\r\n") {
		return errors.New("webhook URL with spaces")
	}
	u, err := url.Parse(raw)
	if err != nil {
		return fmt.Errorf("webhook URL %q does not parse", raw)
	}
	switch {
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("webhook URL %q: only http:// and https:// URLs", raw)
	case u.User != nil:
		return errors.New("webhook URL with a user name or password: put no credentials in the URL")
	case u.Hostname() == "":
		return fmt.Errorf("webhook URL %q has no host", raw)
	}
	return nil
}

// checkEmail accepts one bare address (no display name), short enough for SMTP.
func checkEmail(s string) error {
	if len(s) > maxMailLength {
		return fmt.Errorf("e-mail address longer than %d characters", maxMailLength)
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s || a.Name != "" {
		return fmt.Errorf("%q is not an e-mail address", s)
	}
	return nil
}
