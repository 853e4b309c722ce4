package ui

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strings"
)

// Users checks a user's password (agent/broker's users file: the broker's CheckPassword).
type Users interface {
	CheckPassword(user, password string) bool
}

// Errors of authorize, with the HTTP status each is answered with.
var (
	errNoCredentials = errors.New("credentials needed: send Authorization: Bearer <token> or Basic <user:password>")
	errWrong         = errors.New("wrong token or password")
	errActionsOff    = errors.New("actions are off: the agent has no [ui] token_file and no [broker] users_file")
	errBusy          = errors.New("another password check is under way; try again")
)

func authStatus(err error) int {
	switch err {
	case errActionsOff:
		return http.StatusForbidden
	case errBusy:
		return http.StatusTooManyRequests
	}
	return http.StatusUnauthorized
}

// authorizer checks an action's credentials: the token (compared in constant time, through
// its SHA-256 so that not even its length shows) or a user's password (bcrypt, one check at
// a time: a flood of guesses queues nothing and costs one core at most).
type authorizer struct {
	token    [sha256.Size]byte
	hasToken bool
	users    Users
	bcrypt   chan struct{} // capacity 1: the password check in progress
}

func newAuthorizer(token string, users Users) *authorizer {
	a := &authorizer{users: users, bcrypt: make(chan struct{}, 1)}
	if token != "" {
		a.token, a.hasToken = sha256.Sum256([]byte(token)), true
	}
	return a
}

// enabled reports whether any credentials could act.
func (a *authorizer) enabled() bool { return a.hasToken || a.users != nil }

// authorize returns who sent r ("token" or the user's name), or why not.
func (a *authorizer) authorize(r *http.Request) (who string, err error) {
	if !a.enabled() {
		return "", errActionsOff
	}
	h := r.Header.Get("Authorization")
	scheme, cred, _ := strings.Cut(h, " ")
	switch {
	case h == "":
		return "", errNoCredentials
	case strings.EqualFold(scheme, "Bearer"):
		if !a.hasToken {
			return "", errWrong
		}
		sum := sha256.Sum256([]byte(strings.TrimSpace(cred)))
		if subtle.ConstantTimeCompare(sum[:], a.token[:]) != 1 {
			return "", errWrong
		}
		return "token", nil
	case strings.EqualFold(scheme, "Basic"):
		raw, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
		user, password, ok := strings.Cut(string(raw), ":")
		if err != nil || !ok || user == "" || a.users == nil {
			return "", errWrong
		}
		select {
		case a.bcrypt <- struct{}{}:
		default:
			return "", errBusy
		}
		good := a.users.CheckPassword(user, password)
		<-a.bcrypt
		if !good {
			return "", errWrong
		}
		return user, nil
	}
	return "", errNoCredentials
}
