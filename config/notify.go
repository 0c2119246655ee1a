package config

import (
	"errors"
	"fmt"
	"net"
	"net/mail"
	"net/netip"
	"strings"
	"time"
)

// Notify is the operator's side of the notifications: the mail server every e-mail goes
// through, the networks webhooks may reach besides public addresses, and the deliveries'
// timeout, attempts and retention. Users choose the rest on their profiles.
type Notify struct {
	// SMTPHost is the mail server; empty: no e-mail (users see no e-mail field).
	SMTPHost string
	SMTPPort int
	// SMTPFrom is the sender's address of every e-mail.
	SMTPFrom string
	// SMTPUsername and SMTPPassword log in (PLAIN), over TLS or to localhost only; empty: no login.
	SMTPUsername, SMTPPassword string
	// SMTPStartTLS requires STARTTLS before anything is sent.
	SMTPStartTLS bool
	// WebhookAllowNetworks are networks (CIDR prefixes or addresses) that webhooks may reach
	// though they are loopback, private, link-local or otherwise not public; empty: none.
	WebhookAllowNetworks []string
	// Timeout bounds one delivery; MaxAttempts is how many are made before a delivery is left
	// failed; Retention is how long sent and failed deliveries stay in the outbox.
	Timeout     time.Duration
	MaxAttempts int
	Retention   time.Duration
}

// defaultNotify is DefaultConfig's Notify.
func defaultNotify() Notify {
	return Notify{SMTPPort: 587, SMTPStartTLS: true, Timeout: 10 * time.Second, MaxAttempts: 8,
		Retention: 7 * 24 * time.Hour}
}

// notifyOptions are the notifications' keys.
func notifyOptions() []Option[Config] {
	return []Option[Config]{
		String("smtp_host", "mail server notifications are e-mailed through; empty: no e-mail",
			func(c *Config) *string { return &c.Notify.SMTPHost }, optional(checkHost)),
		Int("smtp_port", "the mail server's port", func(c *Config) *int { return &c.Notify.SMTPPort }, 1, positiveIntReason),
		String("smtp_from", "sender's address of the notifications' e-mails (needed with smtp_host)",
			func(c *Config) *string { return &c.Notify.SMTPFrom }, optional(checkMailAddress)),
		String("smtp_username", "user name to log in to the mail server with (over TLS or to localhost only); empty: no login",
			func(c *Config) *string { return &c.Notify.SMTPUsername }, nil),
		String("smtp_password", "password to log in to the mail server with",
			func(c *Config) *string { return &c.Notify.SMTPPassword }, nil).WithRedact(Redacted),
		Bool("smtp_starttls", "require STARTTLS on the mail server before anything is sent",
			func(c *Config) *bool { return &c.Notify.SMTPStartTLS }),
		List("webhook_allow_networks", "networks webhooks may reach besides public addresses (loopback, private, link-local are refused otherwise): CIDR prefixes or addresses, comma-separated; empty: none",
			func(c *Config) *[]string { return &c.Notify.WebhookAllowNetworks }, checkAllowNetworks),
		durationOption("notify_timeout", "the longest one delivery of a notification (a webhook call, an e-mail) may take",
			func(c *Config) *time.Duration { return &c.Notify.Timeout }),
		intOption("notify_max_attempts", "attempts at delivering a notification before it is left failed (retried with doubling waits from 30 s, at most an hour apart)",
			func(c *Config) *int { return &c.Notify.MaxAttempts }),
		durationOption("notify_retention", "how long sent and failed notifications stay in the outbox before they are pruned",
			func(c *Config) *time.Duration { return &c.Notify.Retention }),
	}
}

// validateNotify checks the rules that relate the notifications' keys.
func (c Config) validateNotify() error {
	if c.Notify.SMTPHost != "" && c.Notify.SMTPFrom == "" {
		return fmt.Errorf("invalid smtp_from \"\" (from %s): needed with smtp_host %q (from %s)",
			c.source("smtp_from"), c.Notify.SMTPHost, c.source("smtp_host"))
	}
	return nil
}

// checkHost accepts a host name or address without a port.
func checkHost(s string) error {
	if strings.ContainsAny(s, ":/ \t") && net.ParseIP(s) == nil {
		return errors.New("a host name or address, without a port or scheme")
	}
	return nil
}

// checkMailAddress accepts one bare e-mail address.
func checkMailAddress(s string) error {
	a, err := mail.ParseAddress(s)
	if err != nil || a.Address != s {
		return errors.New("an e-mail address such as shoal@example.org")
	}
	return nil
}

// checkAllowNetworks accepts CIDR prefixes and addresses, none as wide as every address.
func checkAllowNetworks(entries []string) error {
	_, err := ParseAllowNetworks(entries)
	return err
}

// ParseAllowNetworks reads webhook_allow_networks: addresses ("10.0.0.5") or CIDR prefixes
// ("10.0.0.0/8"). An entry that holds every address (0.0.0.0/0, ::/0) is refused: it would turn
// the check off for everyone.
func ParseAllowNetworks(entries []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, e := range entries {
		e = strings.TrimSpace(e)
		if e == "" {
			continue
		}
		var p netip.Prefix
		if a, err := netip.ParseAddr(e); err == nil {
			p = netip.PrefixFrom(a, a.BitLen())
		} else if p, err = netip.ParsePrefix(e); err != nil {
			return nil, fmt.Errorf("%q is neither an address nor a CIDR prefix", e)
		}
		if p.Bits() == 0 {
			return nil, fmt.Errorf("%q allows every address", e)
		}
		out = append(out, p.Masked())
	}
	return out, nil
}
