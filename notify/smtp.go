package notify

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/smtp"
	"strconv"
	"time"

	"github.com/shoal-chess/shoal/rundb"
)

// SMTP is the operator's mail server, which every e-mail goes through; a user names only the
// address to write to.
type SMTP struct {
	Host string
	Port int
	// From is the sender's address.
	From string
	// Username and Password, if set, log in (PLAIN), which net/smtp allows only over TLS or to
	// localhost.
	Username, Password string
	// StartTLS requires the server to offer STARTTLS and switches to TLS before anything else.
	StartTLS bool
	// TLS is the TLS configuration of STARTTLS; nil: the system's roots, checked against Host.
	TLS *tls.Config
}

// Enabled reports whether mail can be sent at all.
func (s *SMTP) Enabled() bool { return s != nil && s.Host != "" && s.From != "" }

// send delivers e by mail, within timeout.
func (s *SMTP) send(ctx context.Context, e *rundb.OutboxEntry, timeout time.Duration, now time.Time) error {
	if !s.Enabled() {
		return errors.New("e-mail is not configured")
	}
	if err := checkEmail(e.Target); err != nil {
		return err
	}
	d := net.Dialer{Timeout: timeout}
	conn, err := d.DialContext(ctx, "tcp", net.JoinHostPort(s.Host, strconv.Itoa(s.Port)))
	if err != nil {
		return fmt.Errorf("smtp dial: %w", err)
	}
	defer conn.Close()
	deadline := now.Add(timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	_ = conn.SetDeadline(deadline)
	c, err := smtp.NewClient(conn, s.Host)
	if err != nil {
		return fmt.Errorf("smtp greeting: %w", err)
	}
	defer c.Close()
	if s.StartTLS {
		if ok, _ := c.Extension("STARTTLS"); !ok {
			return errors.New("smtp: the server does not offer STARTTLS")
		}
		cfg := s.TLS
		if cfg == nil {
			cfg = &tls.Config{ServerName: s.Host, MinVersion: tls.VersionTLS12}
		}
		if err := c.StartTLS(cfg); err != nil {
			return fmt.Errorf("smtp starttls: %w", err)
		}
	}
	if s.Username != "" {
		if err := c.Auth(smtp.PlainAuth("", s.Username, s.Password, s.Host)); err != nil {
			return fmt.Errorf("smtp auth: %w", err)
		}
	}
	if err := c.Mail(s.From); err != nil {
		return fmt.Errorf("smtp MAIL FROM: %w", err)
	}
	if err := c.Rcpt(e.Target); err != nil {
		return fmt.Errorf("smtp RCPT TO: %w", err)
	}
	w, err := c.Data()
	if err != nil {
		return fmt.Errorf("smtp DATA: %w", err)
	}
	if _, err := w.Write(mailMessage(s.From, e, now)); err != nil {
		return fmt.Errorf("smtp write: %w", err)
	}
	if err := w.Close(); err != nil {
		return fmt.Errorf("smtp end of data: %w", err)
	}
	return c.Quit()
}
