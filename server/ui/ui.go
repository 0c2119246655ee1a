package ui

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/gin-contrib/sessions"
	"github.com/gin-contrib/sessions/cookie"
	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
)

// The web UI's session is a signed and encrypted cookie: it holds who is logged in, the CSRF
// token and the flash messages, nothing else.
const (
	sessionCookie = "shoal_session"
	sessionUser   = "user"  // username, absent when logged out
	sessionStamp  = "stamp" // the user's SessionStamp when the session was opened
	sessionCSRF   = "csrf"  // the token every state-changing form carries
	// sessionRemember marks a "remember me" login: the cookie outlives the browser, and a
	// session reopened after a password change keeps that lifetime.
	sessionRemember = "remember"
	// sessionID is the session's id, which the user document lists while the session is open
	// (rundb.User.Sessions): ending it there ends the session, wherever its cookie was copied.
	sessionID = "sid"
	// rememberAge is how long a "remember me" login lasts; browserAge how long any other
	// lasts on the server, its cookie ending with the browser too.
	rememberAge = 30 * 24 * time.Hour
	browserAge  = 12 * time.Hour
)

// UserKey is the request context's key of the logged-in user (a *rundb.User), which LoadUser
// sets and CurrentUser reads.
const UserKey = "shoal.user"

// CSRFField is the form field (and X-CSRF-Token the header) carrying the CSRF token.
const CSRFField = "csrf_token"

// maxFormBody bounds a UI form that is not a file upload; the largest, a new test with a long
// SPSA parameter list, is a few kilobytes.
const maxFormBody = 1 << 20

// newSessionStore builds the cookie store from the session secret: one key signs, one
// encrypts, both derived from the secret so operators configure one value.
func newSessionStore(secret []byte) cookie.Store {
	auth := sha256.Sum256(append([]byte("shoal session auth\x00"), secret...))
	enc := sha256.Sum256(append([]byte("shoal session encryption\x00"), secret...))
	store := cookie.NewStore(auth[:], enc[:])
	// The signed value's own expiry (securecookie's, 30 days by default) must not end a
	// remembered login before its cookie does.
	if m, ok := store.(interface{ MaxAge(int) }); ok {
		m.MaxAge(int(rememberAge / time.Second))
	}
	store.Options(sessions.Options{Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode})
	return store
}

// Sessions is the middleware that opens the request's session, the signed and encrypted
// cookie the handlers read.
func (s *Server) Sessions() gin.HandlerFunc { return sessions.Sessions(sessionCookie, s.sessions) }

// CookieOptions gives this request's session cookie its flags whenever it is written: Secure
// when the browser came over TLS, and a remembered login's lifetime. (The store's defaults
// would otherwise drop both on any save after the login's.)
func CookieOptions(c *gin.Context) {
	applyCookieOptions(c, sessions.Default(c))
	c.Next()
}

// applyCookieOptions sets the session cookie's flags from what the session holds now: Secure
// over TLS, and rememberAge for a remembered login.
func applyCookieOptions(c *gin.Context, sess sessions.Session) {
	var age time.Duration
	if remember, _ := sess.Get(sessionRemember).(bool); remember {
		age = rememberAge
	}
	sess.Options(sessionOptions(c, age))
}

// Headers sets the headers every page carries: no caching of personal pages, and a content
// security policy that allows only Shoal's own scripts and styles, so injected markup cannot
// run.
func Headers(c *gin.Context) {
	setPageHeaders(c.Writer.Header())
	c.Next()
}

// setPageHeaders sets the headers of every HTML page: the UI's, and the error pages of routes
// outside it (404, 405, a panic's 500).
func setPageHeaders(h http.Header) {
	h.Set("Cache-Control", "no-cache, private")
	h.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; "+
		"script-src 'self'; object-src 'none'; frame-ancestors 'none'; base-uri 'self'; form-action 'self'")
	h.Set("X-Frame-Options", "DENY") // for browsers that predate frame-ancestors
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
}

// secureRequest reports whether the browser reached Shoal over TLS, directly or through the
// a trusted proxy, so cookies get the Secure flag.
func secureRequest(c *gin.Context) bool {
	if c.Request.TLS != nil {
		return true
	}
	// X-Forwarded-Proto is only believed from a trusted proxy, as ClientIP is.
	return guard.FromProxy(c) && strings.EqualFold(c.GetHeader("X-Forwarded-Proto"), "https")
}

// SiteURL is the absolute URL of path on this site, as the browser reached it (for Open
// Graph, and links in emails).
func SiteURL(c *gin.Context, path string) string {
	scheme := "http"
	if secureRequest(c) {
		scheme = "https"
	}
	return scheme + "://" + c.Request.Host + path
}

// sessionOptions returns the cookie options for this request; maxAge 0 ends with the browser.
func sessionOptions(c *gin.Context, maxAge time.Duration) sessions.Options {
	return sessions.Options{Path: "/", HttpOnly: true, SameSite: http.SameSiteLaxMode,
		Secure: secureRequest(c), MaxAge: int(maxAge / time.Second)}
}

// LoadUser makes the session's user known to the handlers. A session whose user is gone,
// blocked or pending, or whose password has changed since login, ends here and now: the
// user document is read on every request, so an approver's block takes effect on the
// blocked user's next click.
func (s *Server) LoadUser(c *gin.Context) {
	sess := sessions.Default(c)
	name, _ := sess.Get(sessionUser).(string)
	if name == "" {
		c.Next()
		return
	}
	var u *rundb.User
	err := s.deps.Tokens.Do(c.Request.Context(), func(ctx context.Context) error {
		var err error
		u, err = s.deps.Users.Get(ctx, name)
		return err
	})
	switch {
	case errors.Is(err, rundb.ErrNotFound):
		u = nil
	case err != nil:
		s.Error(c, err)
		return
	}
	stamp, _ := sess.Get(sessionStamp).(string)
	sid, _ := sess.Get(sessionID).(string)
	if !SessionHolds(u, stamp, sid, time.Now()) {
		s.EndSession(c)
		if u != nil && u.Blocked {
			s.Flash(c, "error", "Your account is blocked.")
		}
		s.saveSession(c)
		c.Redirect(http.StatusFound, "/tests")
		c.Abort()
		return
	}
	c.Set(UserKey, u)
	c.Next()
}

// SessionHolds reports whether a session opened with stamp, with id sid, may go on as u at now:
// the user exists, is neither blocked nor pending, has not changed password since, and still
// lists the session as open (no logout, "log out everywhere" or expiry ended it). Pages
// (LoadUser) and live streams apply the same rule.
func SessionHolds(u *rundb.User, stamp, sid string, now time.Time) bool {
	return u != nil && !u.Blocked && !u.Pending && stamp == u.SessionStamp() && sid != "" &&
		u.HasSession(sessionKey(sid), now)
}

// sessionKey is what the user document keeps of a session id: its hash, so that a copy of
// the database opens no session.
func sessionKey(sid string) string {
	sum := sha256.Sum256([]byte("shoal session id\x00" + sid))
	return hex.EncodeToString(sum[:16])
}

// StartSession logs u in: a new session id, recorded on the user document; a new CSRF token (so
// a token seen before login is worthless); with remember, a cookie that outlives the browser.
// On a database error nothing is logged in and the error is answered.
func (s *Server) StartSession(c *gin.Context, u *rundb.User, remember bool) bool {
	sid := guard.NewToken()
	age := browserAge
	if remember {
		age = rememberAge
	}
	if !s.Do(c, func(ctx context.Context) error {
		return s.deps.Users.OpenSession(ctx, u.Username, sessionKey(sid), time.Now().Add(age))
	}) {
		return false
	}
	sess := sessions.Default(c)
	sess.Clear()
	sess.Set(sessionUser, u.Username)
	sess.Set(sessionStamp, u.SessionStamp())
	sess.Set(sessionID, sid)
	sess.Set(sessionCSRF, guard.NewToken())
	if remember {
		sess.Set(sessionRemember, true)
	}
	applyCookieOptions(c, sess)
	return true
}

// CloseSession ends the current session on the server too, or every session of its user with
// everywhere, before the cookie is cleared: a copy of the cookie is worthless afterwards.
func (s *Server) CloseSession(c *gin.Context, everywhere bool) bool {
	sess := sessions.Default(c)
	name, _ := sess.Get(sessionUser).(string)
	sid, _ := sess.Get(sessionID).(string)
	if name == "" {
		return true
	}
	return s.Do(c, func(ctx context.Context) error {
		var err error
		if everywhere {
			err = s.deps.Users.CloseAllSessions(ctx, name)
		} else {
			err = s.deps.Users.CloseSession(ctx, name, sessionKey(sid))
		}
		if errors.Is(err, rundb.ErrNotFound) {
			return nil // the user is gone, and the session with them
		}
		return err
	})
}

// EndSession logs out: the session keeps nothing but a fresh CSRF token.
func (s *Server) EndSession(c *gin.Context) {
	sess := sessions.Default(c)
	sess.Clear()
	sess.Set(sessionCSRF, guard.NewToken())
	applyCookieOptions(c, sess)
	c.Set(UserKey, (*rundb.User)(nil))
}

// saveSession writes the session cookie; a failure (a cookie over the size limit) is logged,
// as the page itself can still be served.
func (s *Server) saveSession(c *gin.Context) {
	if err := sessions.Default(c).Save(); err != nil {
		s.logger.Error("save session", "err", err)
	}
}

// csrfToken returns the session's CSRF token, creating one on first use.
func (s *Server) csrfToken(c *gin.Context) string {
	sess := sessions.Default(c)
	tok, _ := sess.Get(sessionCSRF).(string)
	if tok == "" {
		tok = guard.NewToken()
		// The cookie keeps the options CookieOptions gave it: a session without a token is
		// no remembered login.
		sess.Set(sessionCSRF, tok)
		s.saveSession(c)
	}
	return tok
}

// CheckCSRF refuses a state-changing request whose csrf_token field (or X-CSRF-Token header)
// does not match the session's token. It runs on every UI POST, before any handler, and bounds
// the body first, whatever carries the token: only the upload takes a multipart body (its
// handler streams it), every other form is read through a maxFormBody cap. A body is never
// parsed into memory or spooled to disk before these rules apply.
func (s *Server) CheckCSRF(c *gin.Context) {
	if c.Request.Method == http.MethodGet || c.Request.Method == http.MethodHead {
		c.Next()
		return
	}
	want, _ := sessions.Default(c).Get(sessionCSRF).(string)
	got := c.GetHeader("X-CSRF-Token")
	if strings.HasPrefix(strings.ToLower(c.ContentType()), "multipart/") {
		// A file upload is streamed by its handler, never parsed here (parsing would spool it
		// to disk before anyone is known). The handler checks the token (header, or the
		// form's first field) with CSRFTokenMatches before it reads the file. No other forms
		// than the network and book uploads send files, so no other route takes a multipart
		// body.
		if c.FullPath() != UploadPath && c.FullPath() != BooksPath {
			s.PageError(c, http.StatusUnsupportedMediaType, "This form does not take files.")
			return
		}
		c.Next()
		return
	}
	c.Request.Body = http.MaxBytesReader(c.Writer, c.Request.Body, maxFormBody)
	if err := c.Request.ParseForm(); err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			s.PageError(c, http.StatusRequestEntityTooLarge, "This form is too large.")
			return
		}
		s.PageError(c, http.StatusBadRequest, "This form could not be read.")
		return
	}
	if got == "" {
		got = c.Request.PostForm.Get(CSRFField)
	}
	if want == "" || subtle.ConstantTimeCompare([]byte(got), []byte(want)) != 1 {
		s.PageError(c, http.StatusForbidden, "This form has expired or did not come from Shoal. Go back, reload the page and try again.")
		return
	}
	c.Next()
}

// CSRFTokenMatches reports whether token is the session's CSRF token (for the upload, whose
// handler reads it from the streamed form).
func CSRFTokenMatches(c *gin.Context, token string) bool {
	want, _ := sessions.Default(c).Get(sessionCSRF).(string)
	return want != "" && subtle.ConstantTimeCompare([]byte(token), []byte(want)) == 1
}

// SessionIdentity returns who the request's session was opened for: the username ("" when
// logged out), the user's SessionStamp then, and the session's id. A live stream checks them
// again now and then (SessionHolds).
func SessionIdentity(c *gin.Context) (name, stamp, sid string) {
	sess := sessions.Default(c)
	name, _ = sess.Get(sessionUser).(string)
	stamp, _ = sess.Get(sessionStamp).(string)
	sid, _ = sess.Get(sessionID).(string)
	return name, stamp, sid
}

// SessionCSRF is the session's CSRF token, read without creating one (for forms in a live
// stream's blocks: the page that opened the stream has made it already).
func SessionCSRF(c *gin.Context) string {
	tok, _ := sessions.Default(c).Get(sessionCSRF).(string)
	return tok
}

// Remembered reports whether the session is a "remember me" login.
func Remembered(c *gin.Context) bool {
	remember, _ := sessions.Default(c).Get(sessionRemember).(bool)
	return remember
}

// CurrentUser returns the logged-in user, or nil.
func CurrentUser(c *gin.Context) *rundb.User {
	u, _ := c.Get(UserKey)
	user, _ := u.(*rundb.User)
	return user
}

// RequireUser returns the logged-in user; otherwise it sends the browser to the login page,
// which brings it back here, and returns false.
func (s *Server) RequireUser(c *gin.Context) (*rundb.User, bool) {
	if u := CurrentUser(c); u != nil {
		return u, true
	}
	next := c.Request.URL.RequestURI()
	if c.Request.Method != http.MethodGet {
		next = c.GetHeader("Referer")
		if ref, err := url.Parse(next); err == nil {
			next = ref.RequestURI()
		}
	}
	s.Flash(c, "info", "Please log in first.")
	s.saveSession(c)
	c.Redirect(http.StatusSeeOther, "/login?next="+url.QueryEscape(next))
	c.Abort()
	return nil, false
}

// RequireApprover returns the logged-in approver; anyone else gets 403 (or the login page).
func (s *Server) RequireApprover(c *gin.Context) (*rundb.User, bool) {
	u, ok := s.RequireUser(c)
	if !ok {
		return nil, false
	}
	if !u.IsApprover() {
		s.PageError(c, http.StatusForbidden, "Only approvers may do this.")
		return nil, false
	}
	return u, true
}

// flash is a one-time message shown on the next page rendered.
type flash struct {
	Kind    string // "info", "success" or "error"
	Message string
}

// Flash queues a message for the next page; the caller saves the session (redirect does).
func (s *Server) Flash(c *gin.Context, kind, msg string) {
	sessions.Default(c).AddFlash(kind+"\x00"+msg, "flash")
}

// takeFlashes returns and removes the queued messages.
func (s *Server) takeFlashes(c *gin.Context) []flash {
	sess := sessions.Default(c)
	raw := sess.Flashes("flash")
	if len(raw) == 0 {
		return nil
	}
	out := make([]flash, 0, len(raw))
	for _, r := range raw {
		str, _ := r.(string)
		kind, msg, _ := strings.Cut(str, "\x00")
		out = append(out, flash{Kind: kind, Message: msg})
	}
	s.saveSession(c)
	return out
}

// Redirect ends a successful POST: save the session (flashes, login) and send the browser on
// with 303, so a reload does not post again.
func (s *Server) Redirect(c *gin.Context, to string) {
	s.saveSession(c)
	c.Redirect(http.StatusSeeOther, to)
	c.Abort()
}

// UploadPath is the network upload's route and BooksPath the books' page, which takes a book's
// upload: the two routes that take a multipart (file) body.
const (
	UploadPath = "/upload"
	BooksPath  = "/books"
)

// Page is what every page template gets besides its own data.
type Page struct {
	Title   string
	Version string
	// Path is the request path, for the navigation's current item.
	Path string
	// User is the logged-in user, or nil.
	User *rundb.User
	// CSRF is the token to put in every form (the "csrf" partial does it).
	CSRF    string
	Flashes []flash
	// Primary is false on a secondary instance, where state-changing forms are refused.
	Primary bool
	// PendingUsers is, for an approver, how many sign-ups wait for acceptance.
	PendingUsers int
}

// layoutTokenWait bounds how long a page waits for a token for the layout's pending sign-ups
// badge.
const layoutTokenWait = 250 * time.Millisecond

// Page builds the common part of a page for this request. Outside the UI's routes (an
// unknown path's 404) there is no session, and so no user, token or flashes.
func (s *Server) Page(c *gin.Context, title string) Page {
	p := Page{Title: title, Version: s.deps.Version, Path: c.Request.URL.Path,
		Primary: s.Scheduler() != nil}
	if _, ok := c.Get(sessions.DefaultKey); ok {
		p.User, p.CSRF, p.Flashes = CurrentUser(c), s.csrfToken(c), s.takeFlashes(c)
	}
	if p.User != nil && p.User.IsApprover() {
		// The navigation's "Users (N)"; a failure only leaves the badge out, and so does a
		// pool too busy to give a token soon: the badge must not hold up the page (the tuning
		// page is looked at precisely when the pool is saturated).
		ctx, cancel := context.WithTimeout(c.Request.Context(), layoutTokenWait)
		defer cancel()
		_ = s.deps.Tokens.Do(ctx, func(ctx context.Context) error {
			n, err := s.deps.Users.CountPending(ctx)
			p.PendingUsers = n
			return err
		})
	}
	return p
}

// Do runs database work for a page under the token pool. On failure it renders the error
// page (nothing at all if the browser went away) and returns false.
func (s *Server) Do(c *gin.Context, fn func(ctx context.Context) error) bool {
	err := s.deps.Tokens.Do(c.Request.Context(), fn)
	if err != nil {
		s.Error(c, err)
		return false
	}
	return true
}

// HeavyRead is Do for a read that may scan: it runs fn once a heavy-read slot is free, or
// answers 503 with Retry-After when none frees up in time (guard.HeavyReads.Slot).
func (s *Server) HeavyRead(c *gin.Context, fn func(ctx context.Context) error) bool {
	if !s.heavy.Slot(c) {
		if c.Request.Context().Err() == nil {
			s.PageError(c, http.StatusServiceUnavailable, guard.HeavyBusyText)
		}
		return false
	}
	defer s.heavy.Release()
	return s.Do(c, fn)
}

// Error answers a page whose database work failed: 404 for a missing document, 499 for a
// browser that left, else 500 logged with the request.
func (s *Server) Error(c *gin.Context, err error) {
	switch {
	case errors.Is(err, context.Canceled) && c.Request.Context().Err() != nil:
		c.AbortWithStatus(guard.StatusClientClosedRequest)
	case errors.Is(err, rundb.ErrNotFound):
		s.PageError(c, http.StatusNotFound, "There is no such thing here.")
	default:
		_ = c.Error(err)
		s.PageError(c, http.StatusInternalServerError, "Something went wrong on the server; it has been logged. Try again shortly.")
	}
}

// RequirePrimary refuses a state-changing form on a secondary instance, where the
// scheduler (and so the run cache) is not.
func (s *Server) RequirePrimary(c *gin.Context) bool {
	if s.Scheduler() != nil {
		return true
	}
	s.PageError(c, http.StatusServiceUnavailable, "This instance only serves pages; changes are made on the primary instance. Try again in a moment.")
	return false
}
