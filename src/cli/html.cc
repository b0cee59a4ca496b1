#include "cli/html.h"

#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <map>
#include <set>

#include <fmt/format.h>

#include "onnx_rewrite/error.h"
#include "runtime/process.h"
#include "verify/opset.h"

extern char** environ;

namespace onnx_rewrite {

namespace {

std::string html_escape(const std::string& text) {
  std::string out;
  for (const char c : printable(text)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&quot;"; break;
      default: out += c;
    }
  }
  return out;
}

std::string dot_escape(const std::string& text) {
  std::string out;
  for (const char c : printable(text)) {
    if (c == '"' || c == '\\') out += '\\';
    out += c;
  }
  return out;
}

// Nodes as boxes, the values entering and leaving them as ellipses; edges follow the values.
std::string dot_source(const std::vector<onnx::NodeProto>& nodes, const char* fill) {
  std::string dot = "digraph match {\n  rankdir=TB; bgcolor=\"transparent\";\n";
  dot += "  node [fontname=\"Helvetica\", fontsize=11]; edge [fontname=\"Helvetica\", fontsize=9, color=\"#666666\"];\n";
  std::map<std::string, size_t> producer;
  std::set<std::string> consumed;
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const auto& output : nodes[i].output()) {
      if (!output.empty()) producer[output] = i;
    }
    for (const auto& input : nodes[i].input()) consumed.insert(input);
  }
  std::map<std::string, size_t> values;  // values from outside or leaving, by name
  const auto value_node = [&](const std::string& name) {
    auto [it, added] = values.emplace(name, values.size());
    if (added) {
      dot += fmt::format("  v{} [shape=ellipse, style=filled, fillcolor=\"#f3f3f3\", color=\"#999999\", label=\"{}\"];\n", it->second,
                         dot_escape(name));
    }
    return fmt::format("v{}", it->second);
  };
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& node = nodes[i];
    const std::string domain = normalize_domain(node.domain());
    dot +=
        fmt::format("  n{} [shape=box, style=\"rounded,filled\", fillcolor=\"{}\", label=\"{}\"];\n", i, fill,
                    domain.empty() ? dot_escape(node.op_type()) : dot_escape(display_domain(domain)) + "\\n" + dot_escape(node.op_type()));
    for (const auto& input : node.input()) {
      if (input.empty()) continue;
      auto from = producer.find(input);
      if (from != producer.end()) dot += fmt::format("  n{} -> n{} [label=\"{}\"];\n", from->second, i, dot_escape(input));
      else dot += fmt::format("  {} -> n{};\n", value_node(input), i);
    }
    for (const auto& output : node.output()) {
      if (!output.empty() && !consumed.count(output)) dot += fmt::format("  n{} -> {};\n", i, value_node(output));
    }
  }
  return dot + "}\n";
}

// Graphviz's SVG for `dot`, without its XML prolog (it goes inline into the page).
std::string render_svg(const std::string& source) {
  const auto dot = find_on_path("dot");
  if (!dot) throw UsageError("--html needs Graphviz's `dot` on PATH (Debian: apt install graphviz)");
  char input_path[] = "/tmp/onnx-rewrite-dot-XXXXXX";
  const int input = ::mkstemp(input_path);
  if (input < 0) throw std::runtime_error(std::string("can't make a temporary file for dot: ") + std::strerror(errno));
  ::unlink(input_path);  // the open descriptor is all dot needs
  if (::write(input, source.data(), source.size()) != static_cast<ssize_t>(source.size()) || ::lseek(input, 0, SEEK_SET) != 0) {
    ::close(input);
    throw std::runtime_error("can't write dot's input");
  }
  int pipe_fds[2];
  if (::pipe2(pipe_fds, O_CLOEXEC) != 0) {
    ::close(input);
    throw std::runtime_error("can't make a pipe for dot");
  }
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, input, STDIN_FILENO);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], STDOUT_FILENO);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  std::string program = *dot;
  char format[] = "-Tsvg";
  char* argv[] = {program.data(), format, nullptr};
  pid_t pid = 0;
  const int spawned = posix_spawn(&pid, program.c_str(), &actions, nullptr, argv, environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(input);
  ::close(pipe_fds[1]);
  std::string svg;
  if (spawned == 0) {
    char buffer[65536];
    for (ssize_t n; (n = ::read(pipe_fds[0], buffer, sizeof buffer)) != 0;) {
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) break;
      svg.append(buffer, static_cast<size_t>(n));
    }
  }
  ::close(pipe_fds[0]);
  int status = 0;
  if (spawned == 0) ::waitpid(pid, &status, 0);
  if (spawned != 0 || !WIFEXITED(status) || WEXITSTATUS(status) != 0 || svg.find("<svg") == std::string::npos) {
    throw std::runtime_error("Graphviz's dot failed to lay out a match");
  }
  return svg.substr(svg.find("<svg"));
}

const char* kStyle = R"(body{font-family:Helvetica,Arial,sans-serif;margin:24px;color:#222;max-width:1200px}
h1{font-size:22px}h2{font-size:18px;margin-top:32px;border-bottom:1px solid #ddd;padding-bottom:4px}
table{border-collapse:collapse;margin:8px 0}td,th{border:1px solid #ddd;padding:3px 10px;text-align:left}
th{background:#f5f5f5}td.n{text-align:right}tr.changed td{background:#fff7e0}
.met{color:#1a7f37}.unmet{color:#cf222e}.match{display:flex;gap:24px;align-items:flex-start;margin:8px 0 20px}
.side{flex:1;border:1px solid #e5e5e5;border-radius:6px;padding:8px;overflow:auto}.side h3{font-size:13px;margin:0 0 6px;color:#555}
.place{color:#666;font-size:13px}svg{max-width:100%;height:auto})";

// What ONNX Runtime said of the rewrite, output by output.
std::string verification_section(const Verification& verification) {
  std::string html;
  html += "<h2>Verified in ONNX Runtime</h2>\n";
  const bool good = !verification.failed();
  html += fmt::format(
      "<p><span class=\"{}\">{}</span>{}{}</p>\n", good ? "met" : "unmet", html_escape(verification.status),
      verification.runtime.empty() ? "" : html_escape(fmt::format(" in {} {}", verification.runtime, verification.runtime_version)),
      verification.reason.empty() ? "" : ": " + html_escape(verification.reason));
  if (!verification.outputs.empty()) {
    html += "<table><tr><th>output</th><th>status</th><th>max abs</th><th>max rel</th><th>over tolerance</th><th>notes</th></tr>\n";
    for (const auto& output : verification.outputs) {
      const bool compared = output.status == "match" || output.status == "mismatch";
      std::vector<std::string> notes;
      if (!output.message.empty()) notes.push_back(output.message);
      if (output.non_finite()) notes.push_back("non-finite values");
      if (compared && output.constant()) notes.push_back("constant on both sides");
      html += fmt::format(
          "<tr><td>{}</td><td class=\"{}\">{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td><td "
          "class=\"n\">{}</td><td>{}</td></tr>\n",
          html_escape(output.name),
          output.status == "match"                 ? "met"
          : compared || output.status == "missing" ? "unmet"
                                                   : "",
          html_escape(output.status), compared ? fmt::format("{:.3g}", output.max_abs) : "",
          compared ? fmt::format("{:.3g}", output.max_rel) : "", compared ? std::to_string(output.over_tolerance) : "",
          html_escape(fmt::format("{}", fmt::join(notes, "; "))));
    }
    html += "</table>\n";
  }
  return html;
}

}  // namespace

void require_graphviz() {
  if (!find_on_path("dot")) throw UsageError("--html needs Graphviz's `dot` on PATH (Debian: apt install graphviz)");
}

std::string html_report(const HtmlPage& page) {
  const RewriteResult& result = *page.result;
  std::string html = "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">\n";
  html += fmt::format("<title>onnx-rewrite: {}</title>\n<style>{}</style></head><body>\n", html_escape(page.input), kStyle);
  html += fmt::format("<h1>{} &rarr; {}</h1>\n", html_escape(page.input), html_escape(page.output));
  html += fmt::format("<p>onnx-rewrite {}, target <b>{}</b>: <span class=\"{}\">{}</span></p>\n", ONNX_REWRITE_VERSION,
                      html_escape(page.target), page.target_met ? "met" : "unmet", page.target_met ? "met" : "NOT met");

  html += "<h2>Rules applied</h2>\n";
  if (result.rules.empty()) html += "<p>No rule applied.</p>\n";
  else html += "<table><tr><th>rule</th><th>matches</th><th>nodes replaced</th><th>nodes added</th></tr>\n";
  for (const auto& [id, stats] : result.rules) {
    html +=
        fmt::format("<tr><td><a href=\"#{0}\">{0}</a></td><td class=\"n\">{1}</td><td class=\"n\">{2}</td><td class=\"n\">{3}</td></tr>\n",
                    html_escape(id), stats.matches, stats.nodes_removed, stats.nodes_added);
  }
  if (!result.rules.empty()) html += "</table>\n";

  html += "<h2>Ops before and after</h2>\n<table><tr><th>op</th><th>before</th><th>after</th></tr>\n";
  std::set<OpKey> keys;
  for (const auto& [key, count] : result.before) keys.insert(key);
  for (const auto& [key, count] : result.after) keys.insert(key);
  for (const auto& key : keys) {
    const auto before = result.before.count(key) ? result.before.at(key) : 0;
    const auto after = result.after.count(key) ? result.after.at(key) : 0;
    html += fmt::format("<tr{}><td>{}.{}</td><td class=\"n\">{}</td><td class=\"n\">{}</td></tr>\n",
                        before != after ? " class=\"changed\"" : "", html_escape(display_domain(key.first)), html_escape(key.second),
                        before, after);
  }
  html += "</table>\n";

  std::map<std::string, const Rule*> by_id;
  if (page.rules) {
    for (const auto& rule : page.rules->rules) by_id[rule->id] = rule.get();
  }
  for (const auto& [id, stats] : result.rules) {
    html += fmt::format("<h2 id=\"{0}\">{0}</h2>\n", html_escape(id));
    auto rule = by_id.find(id);
    if (rule != by_id.end() && !rule->second->description.empty())
      html += fmt::format("<p>{}</p>\n", html_escape(rule->second->description));
    int shown = 0;
    for (const auto& match : result.recorded) {
      if (match.rule != id) continue;
      ++shown;
      html += fmt::format("<p class=\"place\">match {} of {}, in {}</p>\n<div class=\"match\">", shown, stats.matches,
                          html_escape(match.place));
      html += fmt::format("<div class=\"side\"><h3>before ({} node{})</h3>{}</div>", match.before.size(),
                          match.before.size() == 1 ? "" : "s", render_svg(dot_source(match.before, "#fde2e1")));
      html += fmt::format("<div class=\"side\"><h3>after ({} node{})</h3>{}</div></div>\n", match.after.size(),
                          match.after.size() == 1 ? "" : "s", render_svg(dot_source(match.after, "#dcf5e3")));
    }
    if (stats.matches > shown) html += fmt::format("<p class=\"place\">{} more match(es) not shown</p>\n", stats.matches - shown);
  }
  if (page.verification) html += verification_section(*page.verification);
  if (!result.notes.empty()) {
    html += "<h2>Notes</h2>\n<ul>\n";
    for (const auto& note : result.notes) html += "<li>" + html_escape(note) + "</li>\n";
    html += "</ul>\n";
  }
  return html + "</body></html>\n";
}

}  // namespace onnx_rewrite
