package people

import (
	"context"
	"errors"
	"html/template"
	"math"
	"net/http"
	"net/mail"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/shoal-chess/shoal/server/ui"

	"github.com/gin-gonic/gin"

	"github.com/shoal-chess/shoal/rundb"
	"github.com/shoal-chess/shoal/server/guard"
)

// TemplateFuncs are the template functions of these pages, which ui.New is given.
func TemplateFuncs() template.FuncMap {
	return template.FuncMap{
		// mailtoAddr is the mailto link to an email address, escaped (see mailtoURL): write
		// href="{{mailtoAddr .Email}}", never href="mailto:{{.Email}}", which html/template leaves
		// a "?" in.
		"mailtoAddr": func(addr string) string { return mailtoURL(addr, "", "") },
	}
}

// --- Logging in and out ---

// loginData is the login form: what was typed (never the password) and why it failed.
type loginData struct {
	ui.Page
	Username string
	Remember bool
	Next     string
	Error    string
}

// LoginPage is GET /login: the login form, which sends the browser on to ?next= once logged in.
func (s *Server) LoginPage(c *gin.Context) {
	next := safeNext(c.Query("next"), "")
	s.ui.Render(c, http.StatusOK, "login", loginData{Page: s.ui.Page(c, "Log in"), Next: next})
}

// LoginSubmit checks the credentials and opens a session. A failed attempt counts against the
// client's address, the username from that address and the username from anywhere; while any
// is over its limit the form answers 429 without checking anything. The attempt takes its
// tokens before the password is checked and gives them back if it was right, so parallel
// guesses get no further than sequential ones.
func (s *Server) LoginSubmit(c *gin.Context) {
	d := loginData{
		Username: strings.TrimSpace(c.PostForm("username")),
		Remember: c.PostForm("remember") != "",
		Next:     safeNext(c.PostForm("next"), ""),
	}
	password := c.PostForm("password")
	res, wait := s.logins.ReserveLogin(c.Request.Context(), guard.ClientKey(c), d.Username)
	if wait > 0 {
		wait = guard.TooMany(c, wait)
		s.logins.Refused(c, "login form", d.Username, wait)
		d.Error = "Too many failed logins. Wait " + waitText(wait) + " and try again."
		d.Page = s.ui.Page(c, "Log in")
		s.ui.Render(c, http.StatusTooManyRequests, "login", d)
		return
	}
	defer res.Release() // unless settled: a database error says nothing about the password
	var u *rundb.User
	var authErr error
	ok := s.ui.Do(c, func(ctx context.Context) error {
		u, authErr = s.deps.Users.Authenticate(ctx, d.Username, password)
		switch {
		case errors.Is(authErr, rundb.ErrBadCredentials), errors.Is(authErr, rundb.ErrBlocked),
			errors.Is(authErr, rundb.ErrPending):
			return nil
		}
		return authErr
	})
	if !ok {
		return
	}
	res.Settle(authErr)
	s.logins.Checked(c, "login form", d.Username, authErr)
	if authErr != nil {
		status := http.StatusForbidden
		d.Error = authErr.Error()
		switch {
		case errors.Is(authErr, rundb.ErrBadCredentials):
			status = http.StatusBadRequest
		case errors.Is(authErr, rundb.ErrPending):
			d.Error += " An approver looks at every new account, to keep spam out; this is usually " +
				"quick, but can take a few hours. Thank you for your patience."
		}
		d.Page = s.ui.Page(c, "Log in")
		s.ui.Render(c, status, "login", d)
		return
	}
	if !s.ui.StartSession(c, u, d.Remember) {
		return
	}
	s.ui.Redirect(c, safeNext(d.Next, "/tests"))
}

// LogoutSubmit ends the session on the server, so that a copy of its cookie is worthless, and
// with everywhere=1 ("log out everywhere") every other session of the user too.
func (s *Server) LogoutSubmit(c *gin.Context) {
	everywhere := c.PostForm("everywhere") != ""
	if !s.ui.CloseSession(c, everywhere) {
		return
	}
	s.ui.EndSession(c)
	if everywhere {
		s.ui.Flash(c, "info", "You are logged out everywhere: every session of your account has ended.")
	} else {
		s.ui.Flash(c, "info", "You are logged out.")
	}
	s.ui.Redirect(c, "/tests")
}

// --- Signing up ---

// signupForm is what the signup form sends back, passwords aside: a form with errors is shown
// again with these values.
type signupForm struct {
	Username  string
	Email     string
	TestsRepo string
}

type signupData struct {
	ui.Page
	Form   signupForm
	Errors map[string]string
	// Error is a message about the form as a whole (the rate limit).
	Error string
	// PasswordRule describes the password rule next to the field.
	PasswordRule string
}

const (
	maxUsernameLen  = 32
	minPasswordLen  = 8
	maxPasswordLen  = 72 // bcrypt's limit, and fishtest's
	longPasswordLen = 12
	maxEmailLen     = 254
)

const passwordRule = "At least 8 characters; under 12, mix at least two of: lower-case letters, " +
	"upper-case letters, digits, other characters. Not a common password, not your username."

var (
	// signupUsername is rundb's rule for usernames (letters and digits, at least two).
	signupUsername = regexp.MustCompile(`^[A-Za-z0-9]{2,}$`)
	// githubRepoURL is a repository's address on GitHub, as runs' tests_repo holds it.
	githubRepoURL = regexp.MustCompile(`^https://github\.com/[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)
)

// SignupPage is GET /signup: the form that creates an account, for an approver to accept.
func (s *Server) SignupPage(c *gin.Context) {
	if ui.CurrentUser(c) != nil {
		c.Redirect(http.StatusFound, "/tests")
		return
	}
	s.ui.Render(c, http.StatusOK, "signup", signupData{Page: s.ui.Page(c, "Sign up"), Errors: map[string]string{},
		PasswordRule: passwordRule})
}

// SignupSubmit creates a pending account. There is no CAPTCHA (nothing outside the machine is
// reachable); instead each address may send a few valid forms an hour, and an approver accepts
// every account before it can log in. A valid form takes its token before the username and
// email are looked up, so that "this email has an account" answers are as limited as signups,
// also for parallel requests.
func (s *Server) SignupSubmit(c *gin.Context) {
	if ui.CurrentUser(c) != nil {
		s.ui.Redirect(c, "/tests")
		return
	}
	if !s.ui.RequirePrimary(c) {
		return
	}
	f := signupForm{
		Username:  strings.TrimSpace(c.PostForm("username")),
		Email:     strings.TrimSpace(c.PostForm("email")),
		TestsRepo: strings.TrimSpace(c.PostForm("tests_repo")),
	}
	password, password2 := c.PostForm("password"), c.PostForm("password2")
	d := signupData{Form: f, Errors: map[string]string{}, PasswordRule: passwordRule}
	show := func(status int) {
		d.Page = s.ui.Page(c, "Sign up")
		s.ui.Render(c, status, "signup", d)
	}
	ip := guard.ClientKey(c)
	limited := func(wait time.Duration) {
		wait = guard.TooMany(c, wait)
		d.Error = "Too many accounts were created from your address. Wait " + waitText(wait) + " and try again."
		show(http.StatusTooManyRequests)
	}
	// Already over the limit: say so before the form's errors.
	if wait := s.logins.SignupWait(ip); wait > 0 {
		limited(wait)
		return
	}

	if msg := checkUsername(f.Username); msg != "" {
		d.Errors["username"] = msg
	}
	if msg := checkPassword(password, f.Username, f.Email); msg != "" {
		d.Errors["password"] = msg
	} else if password != password2 {
		d.Errors["password2"] = "The two passwords differ."
	}
	email, msg := normaliseEmail(f.Email)
	if msg != "" {
		d.Errors["email"] = msg
	}
	repo, msg := normaliseRepo(f.TestsRepo)
	if msg != "" {
		d.Errors["tests_repo"] = msg
	}
	if len(d.Errors) > 0 {
		show(http.StatusBadRequest)
		return
	}

	res, wait := s.logins.ReserveSignup(c.Request.Context(), ip)
	if wait > 0 {
		limited(wait)
		return
	}
	defer res.Release() // unless consumed: a database error, and the form was not looked at
	f.Email, f.TestsRepo = email, repo
	var nameTaken, emailTaken bool
	ok := s.ui.Do(c, func(ctx context.Context) error {
		var err error
		nameTaken, emailTaken, err = s.deps.Users.Taken(ctx, f.Username, f.Email)
		if err != nil || nameTaken || emailTaken {
			return err
		}
		_, err = s.deps.Users.Create(ctx, rundb.NewUser{Username: f.Username, Password: password, Email: f.Email})
		if errors.Is(err, rundb.ErrConflict) {
			nameTaken = true
			return nil
		}
		if err != nil {
			return err
		}
		if f.TestsRepo != "" {
			return s.deps.Users.SetProfile(ctx, f.Username, f.Email, f.TestsRepo)
		}
		return nil
	})
	if !ok {
		return
	}
	res.Consume()
	if nameTaken || emailTaken {
		if nameTaken {
			d.Errors["username"] = "This username is taken."
		}
		if emailTaken {
			d.Errors["email"] = "An account with this email exists already."
		}
		show(http.StatusConflict)
		return
	}
	s.logger.Info("signup", "user", f.Username, "ip", c.ClientIP())
	s.ui.Flash(c, "success", "Your account is created, and an approver must accept your account before you can "+
		"log in. This is usually quick, but can take a few hours. Thank you for contributing!")
	s.ui.Redirect(c, "/login")
}

// checkUsername returns what is wrong with a new username, or "".
func checkUsername(name string) string {
	switch {
	case name == "":
		return "Choose a username."
	case len(name) > maxUsernameLen:
		return "At most 32 letters and digits."
	case !signupUsername.MatchString(name):
		return "Only letters (A-Z, a-z) and digits, at least two."
	}
	return ""
}

// commonPasswords are passwords people pick first, which any guessing starts with. Entries
// shorter than minPasswordLen are refused by length anyway.
var commonPasswords = map[string]bool{}

func init() {
	for _, p := range strings.Fields(`password password1 password12 password123 password1234
		passw0rd p@ssw0rd p@ssword 12345678 123456789 1234567890 12345678910 123123123
		87654321 11111111 00000000 88888888 qwertyuiop qwerty123 qwerty1234 1q2w3e4r 1q2w3e4r5t
		1qaz2wsx 1qaz2wsx3edc zaq12wsx asdfghjkl asdfasdf iloveyou iloveyou1 sunshine1 princess1
		football baseball basketball superman batman123 trustno1 letmein1 welcome1 welcome123
		monkey123 dragon123 master123 abc12345 abcd1234 abcdefgh changeme changeme123 secret123
		admin123 administrator qwerty12 starwars whatever1 computer michael1 jennifer
		stockfish stockfish1 stockfish123 fishtest fishtest1 fishtest123 chess123 chessmaster
		magnuscarlsen shoal123 shoalchess`) {
		commonPasswords[p] = true
	}
}

// checkPassword returns what is wrong with a new password, or "". The rule: 8 to 72 bytes, not
// a common password, not containing the username or the email's local part, at least five
// different characters, and under 12 characters at least two kinds of character (lower case,
// upper case, digits, others). It stands in for fishtest's zxcvbn score, whose Go ports are
// no longer maintained: it refuses what guessing tries first and leaves long passphrases alone.
func checkPassword(password, username, email string) string {
	lower := strings.ToLower(password)
	local, _, _ := strings.Cut(strings.ToLower(email), "@")
	kinds := map[string]bool{}
	distinct := map[rune]bool{}
	for _, r := range password {
		distinct[r] = true
		switch {
		case unicode.IsLower(r):
			kinds["lower"] = true
		case unicode.IsUpper(r):
			kinds["upper"] = true
		case unicode.IsDigit(r):
			kinds["digit"] = true
		default:
			kinds["other"] = true
		}
	}
	switch {
	case password == "":
		return "Choose a password."
	case len(password) < minPasswordLen:
		return "At least 8 characters."
	case len(password) > maxPasswordLen:
		return "At most 72 bytes."
	case commonPasswords[lower]:
		return "This password is among the first ones guessed; choose another."
	case username != "" && strings.Contains(lower, strings.ToLower(username)):
		return "The password must not contain your username."
	case len(local) >= 3 && strings.Contains(lower, local):
		return "The password must not contain your email address."
	case len(distinct) < 5:
		return "Use at least five different characters."
	case len([]rune(password)) < longPasswordLen && len(kinds) < 2:
		return "Under 12 characters, mix at least two kinds: lower case, upper case, digits, others."
	}
	return ""
}

// normaliseEmail checks an email address and returns it in the form stored: the bare address
// with its domain in lower case. The message says what is wrong, or is "".
func normaliseEmail(s string) (string, string) {
	if s == "" {
		return "", "Give an email address: approvers write to it about your account and workers."
	}
	a, err := mail.ParseAddress(s)
	if err != nil || a.Name != "" || strings.ContainsAny(a.Address, " <>") {
		return "", "This is not an email address."
	}
	local, domain, ok := strings.Cut(a.Address, "@")
	if !ok || local == "" || !strings.Contains(strings.Trim(domain, "."), ".") || strings.HasPrefix(domain, "[") {
		return "", "This is not an email address (the part after @ must be a domain name)."
	}
	addr := local + "@" + strings.ToLower(domain)
	if len(addr) > maxEmailLen {
		return "", "At most 254 characters."
	}
	return addr, ""
}

// normaliseRepo checks an optional tests repository and returns it in the form stored: a
// GitHub repository's https address without a trailing slash or ".git". The message says what
// is wrong, or is "".
func normaliseRepo(s string) (string, string) {
	if s == "" {
		return "", ""
	}
	s = strings.TrimSuffix(strings.TrimSuffix(s, "/"), ".git")
	if strings.HasPrefix(s, "http://") {
		s = "https://" + strings.TrimPrefix(s, "http://")
	}
	if strings.HasPrefix(s, "https://www.github.com/") {
		s = "https://github.com/" + strings.TrimPrefix(s, "https://www.github.com/")
	}
	if !githubRepoURL.MatchString(s) {
		return "", "A GitHub repository's address: https://github.com/OWNER/Stockfish."
	}
	return s, ""
}

// --- Profiles ---

// maxMachineLimit bounds the machine limit an approver may set.
const maxMachineLimit = 1000

// profileForm is what the profile form sends back, passwords aside.
type profileForm struct {
	Email        string
	TestsRepo    string
	MachineLimit string
}

type profileData struct {
	ui.Page
	Target *rundb.User
	// Own is true on one's own profile, which the user edits; approvers see others'.
	Own bool
	// Approver is whether the viewer is an approver (who may block, accept and set limits).
	Approver     bool
	CPUHours     int64
	Games        int
	Tests        int
	MachineLimit int
	Form         profileForm
	Errors       map[string]string
	PasswordRule string
	// Tokens are the user's tokens, on their own profile (tokens.go); NewToken is one just
	// made, shown this once, called NewTokenName; TokenForm is the new-token form as sent.
	Tokens       []rundb.TokenInfo
	NewToken     string
	NewTokenName string
	TokenForm    tokenForm
	MaxTokens    int
	MaxTokenDays int
}

// profileTarget works out whose profile the request is about: the viewer's own at /user, or
// /user/NAME, which only approvers may see for someone else. It answers the request itself
// and returns false when the viewer may not look.
func (s *Server) profileTarget(c *gin.Context) (me, target *rundb.User, ok bool) {
	me, ok = s.ui.RequireUser(c)
	if !ok {
		return nil, nil, false
	}
	name := c.Param("username")
	if name == "" || name == me.Username {
		return me, me, true
	}
	if !me.IsApprover() {
		s.ui.PageError(c, http.StatusForbidden, "Only approvers may see other people's accounts.")
		return nil, nil, false
	}
	if !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		target, err = s.deps.Users.Get(ctx, name)
		return err
	}) {
		return nil, nil, false
	}
	return me, target, true
}

// ProfilePage is GET /user and /user/:username: one's own profile, or an approver's view of
// someone else's.
func (s *Server) ProfilePage(c *gin.Context) {
	me, target, ok := s.profileTarget(c)
	if !ok {
		return
	}
	d := profileData{Target: target, Own: me.Username == target.Username, Approver: me.IsApprover(),
		Form:   profileForm{Email: target.Email, TestsRepo: target.TestsRepo},
		Errors: map[string]string{}}
	s.showProfile(c, http.StatusOK, &d)
}

// showProfile fills in the contributor totals and renders the profile page.
func (s *Server) showProfile(c *gin.Context, status int, d *profileData) {
	if !s.ui.Do(c, func(ctx context.Context) error {
		st, err := s.deps.UserStats.Get(ctx, d.Target.Username)
		switch {
		case errors.Is(err, rundb.ErrNotFound):
			return nil
		case err != nil:
			return err
		}
		d.CPUHours, d.Games, d.Tests = int64(st.CPUHours), st.Games, st.Tests
		return nil
	}) {
		return
	}
	if d.Own && !s.ui.Do(c, func(ctx context.Context) error {
		var err error
		d.Tokens, err = s.deps.Users.Tokens(ctx, d.Target.Username)
		return err
	}) {
		return
	}
	d.MachineLimit = d.Target.EffectiveMachineLimit()
	if d.Form.MachineLimit == "" {
		d.Form.MachineLimit = strconv.Itoa(d.MachineLimit)
	}
	d.PasswordRule = passwordRule
	d.MaxTokens, d.MaxTokenDays = rundb.MaxTokens, maxTokenDays
	if d.TokenForm.Scope == "" {
		d.TokenForm.Scope = string(rundb.ScopeWorker)
	}
	title := "Profile"
	if !d.Own {
		title = "User " + d.Target.Username
	}
	d.Page = s.ui.Page(c, title)
	s.ui.Render(c, status, "profile", d)
}

// ProfileSubmit handles the profile page's forms: one's own profile (email, tests repository,
// password), and an approver's on another account (block or unblock, accept or reject a pending
// account, the machine limit). Which form it is shows in its fields, as in fishtest: "blocked",
// "pending", "machine_limit", or else the profile.
func (s *Server) ProfileSubmit(c *gin.Context) {
	me, target, ok := s.profileTarget(c)
	if !ok || !s.ui.RequirePrimary(c) {
		return
	}
	own := me.Username == target.Username
	_, blocking := c.GetPostForm("blocked")
	_, accepting := c.GetPostForm("pending")
	_, limiting := c.GetPostForm("machine_limit")
	switch {
	case blocking || accepting || limiting:
		if !me.IsApprover() {
			s.ui.PageError(c, http.StatusForbidden, "Only approvers may do this.")
			return
		}
		switch {
		case blocking:
			s.blockUser(c, me, target)
		case accepting:
			s.acceptUser(c, me, target)
		default:
			s.setMachineLimit(c, me, target)
		}
	case own:
		s.editOwnProfile(c, me)
	default:
		s.ui.PageError(c, http.StatusForbidden, "Only "+target.Username+" may change this account's profile.")
	}
}

func (s *Server) blockUser(c *gin.Context, me, target *rundb.User) {
	var block bool
	switch c.PostForm("blocked") {
	case "1":
		block = true
	case "0":
	default:
		s.ui.PageError(c, http.StatusBadRequest, "blocked must be 1 (block) or 0 (unblock).")
		return
	}
	if block && me.Username == target.Username {
		s.ui.PageError(c, http.StatusBadRequest, "You cannot block yourself.")
		return
	}
	word := map[bool]string{true: "blocked", false: "unblocked"}[block]
	if !s.ui.Do(c, func(ctx context.Context) error {
		if err := s.deps.Users.SetBlocked(ctx, target.Username, block); err != nil {
			return err
		}
		return s.deps.Actions.Insert(ctx, &rundb.Action{Action: "block_user", Username: me.Username,
			User: target.Username, Message: word})
	}) {
		return
	}
	s.ui.Flash(c, "success", "User "+target.Username+" is "+word+".")
	s.ui.Redirect(c, "/user/"+target.Username)
}

func (s *Server) acceptUser(c *gin.Context, me, target *rundb.User) {
	if !target.Pending {
		s.ui.PageError(c, http.StatusBadRequest, "The account of "+target.Username+" is not waiting for approval.")
		return
	}
	if c.PostForm("pending") == "0" {
		if !s.ui.Do(c, func(ctx context.Context) error {
			if err := s.deps.Users.Accept(ctx, target.Username); err != nil {
				return err
			}
			return s.deps.Actions.Insert(ctx, &rundb.Action{Action: "accept_user", Username: me.Username,
				User: target.Username, Message: "accepted"})
		}) {
			return
		}
		s.ui.Flash(c, "success", "User "+target.Username+" is accepted and may log in.")
		s.ui.Redirect(c, "/user/"+target.Username)
		return
	}
	// Rejecting deletes the account, as in fishtest, which logs it rather than the event log.
	if !s.ui.Do(c, func(ctx context.Context) error { return s.deps.Users.DeletePending(ctx, target.Username) }) {
		return
	}
	s.logger.Info("user rejected", "user", target.Username, "email", target.Email, "by", me.Username)
	s.ui.Flash(c, "success", "The account of "+target.Username+" is rejected and deleted.")
	s.ui.Redirect(c, "/user_management")
}

func (s *Server) setMachineLimit(c *gin.Context, me, target *rundb.User) {
	raw := strings.TrimSpace(c.PostForm("machine_limit"))
	n, err := strconv.Atoi(raw)
	if err != nil || n < 1 || n > maxMachineLimit {
		d := profileData{Target: target, Own: me.Username == target.Username, Approver: true,
			Form:   profileForm{Email: target.Email, TestsRepo: target.TestsRepo, MachineLimit: raw},
			Errors: map[string]string{"machine_limit": "A whole number from 1 to " + strconv.Itoa(maxMachineLimit) + "."}}
		s.showProfile(c, http.StatusBadRequest, &d)
		return
	}
	if !s.ui.Do(c, func(ctx context.Context) error { return s.deps.Users.SetMachineLimit(ctx, target.Username, n) }) {
		return
	}
	s.logger.Info("machine limit set", "user", target.Username, "limit", n, "by", me.Username)
	s.ui.Flash(c, "success", "The machine limit of "+target.Username+" is now "+strconv.Itoa(n)+".")
	s.ui.Redirect(c, "/user/"+target.Username)
}

// editOwnProfile saves one's email, tests repository and, if given, a new password. The current
// password is required for every change, and a wrong one counts against the login limits (its
// tokens are taken before the check, as on the login form). Whether another account has the
// email is only looked up once the current password is right, so the form tells nobody else
// which addresses have accounts. A new password ends every other session of the user (their
// stamp no longer matches); this one is opened again.
func (s *Server) editOwnProfile(c *gin.Context, me *rundb.User) {
	f := profileForm{Email: strings.TrimSpace(c.PostForm("email")), TestsRepo: strings.TrimSpace(c.PostForm("tests_repo"))}
	old, password, password2 := c.PostForm("old_password"), c.PostForm("password"), c.PostForm("password2")
	d := profileData{Target: me, Own: true, Approver: me.IsApprover(), Form: f, Errors: map[string]string{}}

	email, msg := normaliseEmail(f.Email)
	if msg != "" {
		d.Errors["email"] = msg
	}
	repo, msg := normaliseRepo(f.TestsRepo)
	if msg != "" {
		d.Errors["tests_repo"] = msg
	}
	if password != "" {
		if msg := checkPassword(password, me.Username, email); msg != "" {
			d.Errors["password"] = msg
		} else if password != password2 {
			d.Errors["password2"] = "The two passwords differ."
		}
	}
	if old == "" {
		d.Errors["old_password"] = "Give your current password to change your profile."
		s.showProfile(c, http.StatusBadRequest, &d)
		return
	}
	res, wait := s.logins.ReserveLogin(c.Request.Context(), guard.ClientKey(c), me.Username)
	if wait > 0 {
		wait = guard.TooMany(c, wait)
		s.logins.Refused(c, "profile", me.Username, wait)
		d.Errors["old_password"] = "Too many wrong passwords. Wait " + waitText(wait) + " and try again."
		s.showProfile(c, http.StatusTooManyRequests, &d)
		return
	}
	defer res.Release() // unless settled: a database error says nothing about the password
	var authErr error
	emailTaken := false
	if !s.ui.Do(c, func(ctx context.Context) error {
		_, authErr = s.deps.Users.Authenticate(ctx, me.Username, old)
		if errors.Is(authErr, rundb.ErrBadCredentials) {
			return nil
		}
		if authErr != nil {
			return authErr
		}
		if email != "" && !strings.EqualFold(email, me.Email) {
			var err error
			_, emailTaken, err = s.deps.Users.Taken(ctx, "", email)
			return err
		}
		return nil
	}) {
		return
	}
	res.Settle(authErr)
	s.logins.Checked(c, "profile", me.Username, authErr)
	if authErr != nil {
		d.Errors["old_password"] = "This is not your current password."
	}
	if emailTaken {
		d.Errors["email"] = "Another account has this email address."
	}
	if len(d.Errors) > 0 {
		s.showProfile(c, http.StatusBadRequest, &d)
		return
	}

	var fresh *rundb.User
	if !s.ui.Do(c, func(ctx context.Context) error {
		if err := s.deps.Users.SetProfile(ctx, me.Username, email, repo); err != nil {
			return err
		}
		if password == "" {
			return nil
		}
		if err := s.deps.Users.SetPassword(ctx, me.Username, password); err != nil {
			return err
		}
		var err error
		fresh, err = s.deps.Users.Get(ctx, me.Username)
		return err
	}) {
		return
	}
	if fresh != nil {
		if !s.ui.StartSession(c, fresh, ui.Remembered(c)) {
			return
		}
		s.ui.Flash(c, "success", "Your profile is saved and your password changed: your other sessions are logged out.")
	} else {
		s.ui.Flash(c, "success", "Your profile is saved.")
	}
	s.ui.Redirect(c, "/user")
}

// waitText says how long to wait in words: "40 seconds", "3 minutes".
func waitText(d time.Duration) string {
	switch {
	case d < 2*time.Minute:
		return strconv.Itoa(int(math.Ceil(d.Seconds()))) + " seconds"
	case d < 2*time.Hour:
		return strconv.Itoa(int(math.Ceil(d.Minutes()))) + " minutes"
	default:
		return strconv.Itoa(int(math.Ceil(d.Hours()))) + " hours"
	}
}

// safeNext returns next if it is a path on this site, else fallback: a login link must not
// send people elsewhere. Browsers drop tabs and newlines from a Location and read a backslash
// as a slash, so any of those is refused rather than interpreted.
func safeNext(next, fallback string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") ||
		strings.ContainsFunc(next, func(r rune) bool { return r < 0x20 || r == 0x7f || r == '\\' }) {
		return fallback
	}
	u, err := url.Parse(next)
	if err != nil || u.Scheme != "" || u.Host != "" {
		return fallback
	}
	return next
}
