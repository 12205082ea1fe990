// The command line of Trainyard's three programs (trainctl,
// trainyard-server, trainyard-worker), parsed alike: `--version`, errors as
// "<program>: <message>" (as kubectl's), an unknown command named with the
// nearest known one ("unknown command "lsit" for "trainctl"; did you mean
// "list"?"), and the list of commands for a bare `trainctl`. Header-only:
// only the programs' main.cc include it (CLI11 is header-only too).
#ifndef TRAINYARD_COMMON_COMMAND_LINE_H_
#define TRAINYARD_COMMON_COMMAND_LINE_H_

#include <CLI/CLI.hpp>
#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#ifndef TRAINYARD_VERSION
#define TRAINYARD_VERSION "unknown"
#endif

namespace trainyard {

// Levenshtein distance, for "did you mean".
inline size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

// The first word of `args` that is neither an option nor an option's value,
// for an app whose commands are subcommands; "" when none.
inline std::string FirstCommandWord(CLI::App& app, const std::vector<std::string>& args) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--") return "";
    if (a.size() > 1 && a[0] == '-') {
      if (a.find('=') != std::string::npos) continue;
      const CLI::Option* opt = app.get_option_no_throw(a);
      if (opt != nullptr && opt->get_type_size_max() > 0) ++i;  // its value
      continue;
    }
    return a;
  }
  return "";
}

// Parses the command line of `program`. Returns -1 to go on, or the exit
// code to end with (0 after --version or --help, 2 for a bad command line,
// with the message on stderr).
inline int ParseCommandLine(CLI::App& app, int argc, char** argv, const std::string& program) {
  if (app.get_name().empty()) app.name(program);  // "Usage: trainctl [OPTIONS] ..."
  app.set_version_flag("--version", program + " " TRAINYARD_VERSION);
  std::vector<std::string> args(argv + 1, argv + argc);
  const std::vector<CLI::App*> commands = app.get_subcommands([](CLI::App*) { return true; });
  if (!commands.empty()) {
    if (args.empty()) {  // a bare `trainctl`: what it can do
      std::cout << app.help();
      return 0;
    }
    const std::string word = FirstCommandWord(app, args);
    bool known = word.empty();
    std::string nearest;
    size_t best = 3;  // suggest only what is close
    for (const CLI::App* c : commands) {
      if (c->check_name(word)) known = true;
      if (const size_t d = EditDistance(word, c->get_name()); d < best) best = d, nearest = c->get_name();
    }
    if (!known) {
      std::cerr << program << ": unknown command \"" << word << "\" for \"" << program << "\""
                << (nearest.empty() ? "" : "; did you mean \"" + nearest + "\"?") << "\nRun '" << program
                << " --help' for the commands.\n";
      return 2;
    }
  }
  try {
    std::reverse(args.begin(), args.end());  // CLI11 takes them last first
    app.parse(args);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::cerr << program << ": " << e.what() << "\nRun '" << program << " --help' for usage.\n";
    return e.get_exit_code() == 0 ? 0 : 2;
  }
  return -1;
}

}  // namespace trainyard

#endif  // TRAINYARD_COMMON_COMMAND_LINE_H_
