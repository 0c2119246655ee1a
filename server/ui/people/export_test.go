package people

// What these pages' external tests (package people_test, which drive the pages through the
// whole server) use of their insides.

var (
	CheckPassword  = checkPassword
	NormaliseEmail = normaliseEmail
	MailtoURL      = mailtoURL
	SafeNext       = safeNext
)
