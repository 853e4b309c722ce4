// Command sscli is redis-cli for the Azure IoT Operations state store and faceagent's
// embedded copy of it.
//
//	sscli [--url mqtt://127.0.0.1:1883] [--tls-ca FILE --cert FILE --key FILE]
//	      [--user NAME --password-file FILE] [--client-id ID] [--timeout 10s] COMMAND …
//
// Commands:
//
//	get KEY [-v] [--decode raw|auto|device-state] [--compact]
//	                                   value raw on stdout; -v: version on stderr;
//	                                   --decode device-state: the agent's msgp terminal state
//	                                   as JSON (times RFC 3339 UTC); auto: device-state for
//	                                   keys faceagent/{gw}/devices/{id}, raw for the rest
//	set KEY VALUE|@FILE|- [--nx|--nex] [--px 10s] [--fencing HLC] [--persist] [-v]
//	del KEY [--fencing HLC]
//	vdel KEY VALUE [--fencing HLC]     delete only if KEY holds VALUE
//	watch KEY…                         one line per change until Ctrl-C:
//	                                   `KEY SET "value" VERSION`, `KEY DELETE VERSION`,
//	                                   ` resync` appended to changes found after a reconnect
//	lock NAME [--ttl 10s] [--holder ID] [--wait=false] [--grace 5s] -- CMD [ARGS…]
//	                                   run CMD while holding the lease; SIGTERM (then SIGKILL
//	                                   after --grace) when the lease is lost
//	bench [-n 10000] [-c 16] [--size 32] [--op set|get]
//	                                   round trips a second and latency percentiles
//
// Every connection flag has an environment variable, which the flag overrides:
// FACEAGENT_SS_URL, FACEAGENT_SS_TLS_CA, FACEAGENT_SS_CERT, FACEAGENT_SS_KEY,
// FACEAGENT_SS_USER, FACEAGENT_SS_PASSWORD_FILE, FACEAGENT_SS_CLIENT_ID, FACEAGENT_SS_TIMEOUT.
//
// Exit codes: 0 done; 1 not found, not applied, or lease held (lock --wait=false); 2 any other
// error or bad usage. lock exits with the command's exit code, or 2 when the lease was lost.
//
// # Caveats
//
//   - Connection flags come before COMMAND; a command's own flags may follow its positional
//     arguments, and a VALUE that starts with "-" must come after "--" (sscli set k -- -5).
//     sscli COMMAND -h lists the command's flags.
//   - watch prints values quoted (Go syntax) so binary values stay on one line; get prints
//     them raw unless --decode says otherwise.
//   - The store has no KEYS command: list a gateway's terminals from its config and get
//     faceagent/{gw}/devices/{id} for each (configs/demo.sh does).
//   - bench writes keys under --prefix (default sscli-bench/) and leaves them there.
package main
