// Package attack is the attack suite: it runs attacks against a live faceagent while it
// keeps serving, and checks the bounds.
package attack
