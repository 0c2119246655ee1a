package people

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
)

// tokenForm is what the new-token form sends back, its password aside.
type tokenForm struct {
	Name        string
	Scope       string
	ExpiresDays string
}

// maxTokenDays is the longest expiry the form offers, in days: a year.
var maxTokenDays = int(rundb.MaxTokenLifetime / (24 * time.Hour))

// TokenAdd is POST /tokens: the logged-in user makes a token, given a name, a scope, an
// optional expiry in days and their current password, whose check counts against the login
// limits as on the profile form. The token is shown once, on the page this answers with, and
// never again: it is not put in a flash, which would carry it in the session cookie.
func (s *Server) TokenAdd(c *gin.Context) {
	me, ok := s.ui.RequireUser(c)
	if !ok || !s.ui.RequirePrimary(c) {
		return
	}
	f := tokenForm{Name: strings.TrimSpace(c.PostForm("token_name")), Scope: c.PostForm("token_scope"),
		ExpiresDays: strings.TrimSpace(c.PostForm("token_expires_days"))}
	d := profileData{Target: me, Own: true, Approver: me.IsApprover(), TokenForm: f, Errors: map[string]string{},
		Form: profileForm{Email: me.Email, TestsRepo: me.TestsRepo}}
	nt, fieldErrs := parseTokenForm(f)
	for k, v := range fieldErrs {
		d.Errors[k] = v
	}
	if !s.checkTokenPassword(c, me, c.PostForm("token_password"), &d) {
		return
	}
	if len(d.Errors) > 0 {
		s.showProfile(c, http.StatusBadRequest, &d)
		return
	}
	var token string
	var createErr error
	if !s.ui.Do(c, func(ctx context.Context) error {
		var t *rundb.APIToken
		token, t, createErr = s.deps.Users.CreateToken(ctx, me.Username, nt)
		if errors.Is(createErr, rundb.ErrInvalid) || errors.Is(createErr, rundb.ErrTokenExists) {
			return nil
		}
		if createErr == nil {
			s.logTokenAction(ctx, rundb.TokenMadeAction(me.Username, t, ""))
		}
		return createErr
	}) {
		return
	}
	switch {
	case errors.Is(createErr, rundb.ErrTokenExists):
		d.Errors["token_name"] = "You have a token of this name: revoke it first, or choose another name."
	case createErr != nil:
		d.Errors["token_name"] = "You have " + strconv.Itoa(rundb.MaxTokens) + " tokens, the most one may hold: revoke one first."
	}
	if len(d.Errors) > 0 {
		s.showProfile(c, http.StatusBadRequest, &d)
		return
	}
	s.logger.Info("token created", "user", me.Username, "token", nt.Name, "scope", nt.Scope)
	d.NewToken, d.NewTokenName, d.TokenForm = token, nt.Name, tokenForm{}
	s.showProfile(c, http.StatusOK, &d)
}

// parseTokenForm checks the new-token form's fields; the errors are by field.
func parseTokenForm(f tokenForm) (rundb.NewToken, map[string]string) {
	errs := map[string]string{}
	nt := rundb.NewToken{Name: f.Name, Scope: rundb.TokenScope(f.Scope)}
	if !rundb.ValidTokenName(f.Name) {
		errs["token_name"] = "A name of 1 to 40 letters, digits or dashes."
	}
	if _, err := rundb.ParseTokenScope(f.Scope); err != nil {
		errs["token_scope"] = "Choose worker or api."
	}
	if f.ExpiresDays != "" {
		n, err := strconv.Atoi(f.ExpiresDays)
		if err != nil || n < 1 || n > maxTokenDays {
			errs["token_expires_days"] = "A whole number of days from 1 to " + strconv.Itoa(maxTokenDays) + " (a year), or empty for no expiry."
		}
		nt.Lifetime = time.Duration(n) * 24 * time.Hour
	}
	return nt, errs
}

// checkTokenPassword checks the current password given with a new token, under the login
// limits, noting a wrong one in d.Errors. It returns false once it has answered the request
// (over the limits, or a database error).
func (s *Server) checkTokenPassword(c *gin.Context, me *rundb.User, password string, d *profileData) bool {
	if password == "" {
		d.Errors["token_password"] = "Give your current password to make a token."
		return true
	}
	res, wait := s.logins.ReserveLogin(c.Request.Context(), guard.ClientKey(c), me.Username)
	if wait > 0 {
		wait = guard.TooMany(c, wait)
		s.logins.Refused(c, "token", me.Username, wait)
		d.Errors["token_password"] = "Too many wrong passwords. Wait " + waitText(wait) + " and try again."
		s.showProfile(c, http.StatusTooManyRequests, d)
		return false
	}
	defer res.Release() // unless settled: a database error says nothing about the password
	var authErr error
	if !s.ui.Do(c, func(ctx context.Context) error {
		_, authErr = s.deps.Users.Authenticate(ctx, me.Username, password)
		if errors.Is(authErr, rundb.ErrBadCredentials) {
			return nil
		}
		return authErr
	}) {
		return false
	}
	res.Settle(authErr)
	s.logins.Checked(c, "token", me.Username, authErr)
	if authErr != nil {
		d.Errors["token_password"] = "This is not your current password."
	}
	return true
}

// TokenRevoke is POST /tokens/revoke: the logged-in user revokes one of their tokens, by name.
// It stops working at once on this instance and within the user cache's time on others.
func (s *Server) TokenRevoke(c *gin.Context) {
	me, ok := s.ui.RequireUser(c)
	if !ok || !s.ui.RequirePrimary(c) {
		return
	}
	name := c.PostForm("name")
	var err error
	if !s.ui.Do(c, func(ctx context.Context) error {
		err = s.deps.Users.RevokeToken(ctx, me.Username, name)
		if errors.Is(err, rundb.ErrNotFound) {
			return nil
		}
		if err == nil {
			s.logTokenAction(ctx, rundb.TokenRevokedAction(me.Username, name, ""))
		}
		return err
	}) {
		return
	}
	if err != nil {
		s.ui.Flash(c, "error", "You have no token called "+strconv.Quote(name)+".")
	} else {
		s.logger.Info("token revoked", "user", me.Username, "token", name)
		s.ui.Flash(c, "success", "The token "+name+" is revoked.")
	}
	s.ui.Redirect(c, "/user")
}

// logTokenAction writes a token's making or revocation to the event log. A failure is logged
// and goes no further: the change is made, and a new token must still be shown, this once.
func (s *Server) logTokenAction(ctx context.Context, a *rundb.Action) {
	if err := s.deps.Actions.Insert(ctx, a); err != nil {
		s.logger.Error("event log: token action not written", "action", a.Action, "user", a.Username, "err", err)
	}
}
