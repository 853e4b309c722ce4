// Package config is faceagent's configuration: the TOML schema (github.com/BurntSushi/toml),
// its defaults, board profiles and validation.
//
// # Tutorial
//
//	cfg, err := config.Load("/etc/faceagent/agent.toml", nil)
//	if err != nil {
//		fmt.Fprintln(os.Stderr, err) // one "FILE:LINE: key: what is wrong" per line
//		os.Exit(2)
//	}
//	for _, d := range cfg.Devices {
//		eff := d.Effective(cfg.Dispatch) // [dispatch] with the device's overrides
//		_ = eff.RetryInterval
//	}
//	cfg.WriteTOML(os.Stdout) // the effective configuration, secrets left out
//
// configs/agent.toml documents every key with its default; a test keeps it complete.
//
// # How a file becomes a Config
//
// Parse starts from the defaults (one place: the default* variables in config.go), decodes
// the board profile named by agent.board over them, then the file over that, so a key
// written in the file always wins. Optional sections ([broker], [upstream], [intake.http])
// exist only when the file names them. Then:
//
//   - every key must be in the schema, spelled exactly (the toml package itself would
//     accept "Max_Tries" for max_tries); an unknown key is an error with its line and a
//     suggestion when it is a near miss;
//   - passwords and tokens are read from their *_file or *_env keys (never from the file
//     itself, so configs can be printed and shared);
//   - every value is validated; each problem names its key ("devices[2].baud") and line.
//
// All problems of a file are reported together (type Errors), sorted by line.
//
// # Caveats
//
//   - BurntSushi/toml does not export key positions, so lines come from a small scanner
//     of the file (position.go). Keys inside inline tables are reported at the line of the
//     table's key.
//   - Durations are strings ("2s", "7d"); a bare number is refused rather than guessed.
//   - A board profile (package boards) sets agent.gomemlimit, agent.data_dir and
//     [journal]; every other key keeps its default unless the file sets it. Its serial
//     ports go to [[devices]] with transport = "serial" and no port, in file order,
//     skipping ports named explicitly; a serial device left without one is an error.
//   - Load reads the file once; reloading (SIGHUP) means calling Load again and swapping
//     the result in — a Config is never mutated after Load returns.
package config
