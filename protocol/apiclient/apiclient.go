// Package apiclient is a small client of the server's JSON API for the tools a person runs:
// `shoal run` submits and approves tests with it, and the demo and the bench drive a server
// through it as such a person would.
//
// A Client holds no state of its own beyond its settings, so it is safe for concurrent use as
// long as its fields are not changed. The package imports nothing of Shoal's.
package apiclient

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
)

// MaxReplyBytes bounds what is read of a server reply.
const MaxReplyBytes = 1 << 20

// Client is where the server is and who is asking. The API takes a username and password in
// each request's body, or an api token in an "Authorization: Bearer" header: Post sends the
// body as given, with Token in that header if it is set, and Username and Password are there
// for a caller that builds its bodies from one account (shoal run).
type Client struct {
	Server             string
	Username, Password string
	Token              string
	HTTP               *http.Client
}

// Credentials returns body with the client's username and password added, unless it has a
// token, which Post sends in a header instead.
func (c *Client) Credentials(body map[string]any) map[string]any {
	if c.Token == "" {
		body["username"], body["password"] = c.Username, c.Password
	}
	return body
}

// Post sends body to the API path and decodes a 200 reply into out. Any other reply is an
// error carrying the server's message.
func (c *Client) Post(ctx context.Context, path string, body, out any) error {
	data, err := json.Marshal(body)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, c.Server+path, bytes.NewReader(data))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.Token != "" {
		req.Header.Set("Authorization", "Bearer "+c.Token)
	}
	resp, err := c.HTTP.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach %s: %w", c.Server, err)
	}
	defer resp.Body.Close()
	reply, err := io.ReadAll(io.LimitReader(resp.Body, MaxReplyBytes))
	if err != nil {
		return fmt.Errorf("read reply from %s: %w", c.Server, err)
	}
	if resp.StatusCode != http.StatusOK {
		var e struct {
			Error string `json:"error"`
		}
		if json.Unmarshal(reply, &e) == nil && e.Error != "" {
			return fmt.Errorf("server refused (%s): %s", resp.Status, e.Error)
		}
		return fmt.Errorf("server answered %s: %s", resp.Status, Snippet(reply))
	}
	if err := json.Unmarshal(reply, out); err != nil {
		return fmt.Errorf("unexpected reply from %s: %s", c.Server, Snippet(reply))
	}
	return nil
}

// Get returns the body of url's reply, at most limit bytes of it, if the reply is a 200; any
// other reply is an error carrying its status and the start of its body.
func Get(ctx context.Context, client *http.Client, url string, limit int64) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s", resp.Status, Snippet(data))
	}
	return data, nil
}

// Snippet is the start of a reply, for an error message.
func Snippet(b []byte) string {
	s := strings.TrimSpace(string(b))
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	if s == "" {
		return "(empty reply)"
	}
	return s
}
