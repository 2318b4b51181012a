#include "ps_server/metrics/status_page.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace psrt {
namespace {

std::string Mb(int64_t bytes) { return absl::StrFormat("%.2f", bytes / 1e6); }

double PerSecond(int64_t count, double seconds) {
  return seconds > 0 ? count / seconds : 0;
}

// One bar per PS, the height proportional to its bytes; this PS's in
// another colour.
std::string BalanceChart(const StatusPageData& d) {
  const int64_t most = std::max<int64_t>(
      1, d.bytes_per_ps.empty()
             ? 1
             : *std::max_element(d.bytes_per_ps.begin(), d.bytes_per_ps.end()));
  const int bar = 40, gap = 12, height = 120;
  const int width = static_cast<int>(d.bytes_per_ps.size()) * (bar + gap) + gap;
  std::string svg = absl::StrFormat(
      "<svg id=\"balance\" width=\"%d\" height=\"%d\" "
      "xmlns=\"http://www.w3.org/2000/svg\" role=\"img\" "
      "aria-label=\"bytes per PS\">",
      width, height + 20);
  for (size_t i = 0; i < d.bytes_per_ps.size(); ++i) {
    const int h = static_cast<int>(height * d.bytes_per_ps[i] / most);
    const int x = gap + static_cast<int>(i) * (bar + gap);
    absl::StrAppendFormat(
        &svg,
        "<rect id=\"bar-%d\" x=\"%d\" y=\"%d\" width=\"%d\" height=\"%d\" "
        "fill=\"%s\" data-bytes=\"%d\"><title>PS %d: %s MB</title></rect>"
        "<text x=\"%d\" y=\"%d\" font-size=\"11\">PS %d</text>",
        i, x, height - h, bar, h,
        static_cast<int>(i) == d.ps_task ? "#d9534f" : "#5b8dd9",
        d.bytes_per_ps[i], i, Mb(d.bytes_per_ps[i]), x, height + 14, i);
  }
  absl::StrAppend(&svg, "</svg>");
  return svg;
}

}  // namespace

std::string HtmlEscape(absl::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&#39;";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string RenderStatusPage(const StatusPageData& d) {
  std::string html = absl::StrFormat(
      "<!DOCTYPE html><html><head><meta charset=\"utf-8\">"
      "<title>psrt PS %d</title><style>"
      "body{font-family:sans-serif;margin:1.5em}"
      "table{border-collapse:collapse;margin-bottom:1.5em}"
      "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}"
      "th{background:#eee}td.l{text-align:left}"
      "</style></head><body>"
      "<h1>psrt parameter server <span id=\"ps-task\">%d</span> of "
      "<span id=\"num-ps\">%d</span></h1>"
      "<p>up <span id=\"uptime\">%.0f</span> s, global step "
      "<span id=\"global-step\">%d</span>",
      d.ps_task, d.ps_task, d.num_ps, d.uptime_seconds, d.global_step);
  if (!d.restored_from.empty()) {
    absl::StrAppend(&html, ", restored from <code id=\"restored-from\">",
                    HtmlEscape(d.restored_from), "</code>");
  }
  absl::StrAppend(&html, "</p>");
  if (d.replicas > 1) {
    absl::StrAppendFormat(
        &html,
        "<h2>Replicas</h2><p><span id=\"replicas\">%d</span> copies of each "
        "shard: this PS serves <span id=\"primary-shards\">%d</span> and "
        "keeps backup copies of <span id=\"backup-shards\">%d</span>; "
        "failovers it knows of: <span id=\"failed-ps\">%s</span>",
        d.replicas, d.primary_shards, d.backup_shards,
        d.failed_ps.empty() ? "none" : absl::StrJoin(d.failed_ps, ", "));
    if (!d.lease.empty()) {
      absl::StrAppend(&html, "; lease <span id=\"lease\">", HtmlEscape(d.lease),
                      "</span>");
    }
    if (d.replaced) {
      absl::StrAppend(&html,
                      "; <b id=\"replaced\">replaced by its backup: it serves "
                      "nothing</b>");
    }
    absl::StrAppend(&html,
                    " (per shard: <code>psctl replicas</code>; lag: "
                    "<code>psrt_replication_lag_updates</code>)</p>");
  }

  absl::StrAppend(&html,
                  "<h2>Variables</h2><table id=\"variables\"><tr><th>name</th>"
                  "<th>kind</th><th>shards here / all</th><th>rows here</th>"
                  "<th>MB here</th><th>admission, eviction</th></tr>");
  for (size_t i = 0; i < d.variables.size(); ++i) {
    const StatusPageData::Variable& v = d.variables[i];
    std::string admission;
    if (v.admission_min_count > 1) {
      admission = absl::StrFormat(
          "min_count %d: <span id=\"var-%d-admitted\">%d</span> admitted, "
          "<span id=\"var-%d-unadmitted\">%d</span> gradients dropped",
          v.admission_min_count, i, v.admitted_rows, i, v.unadmitted_gradients);
    }
    if (v.eviction_ttl_steps > 0 || v.eviction_max_rows > 0 ||
        v.evicted_rows > 0) {
      std::string rule =
          v.eviction_ttl_steps > 0
              ? absl::StrFormat("ttl %d steps", v.eviction_ttl_steps)
              : "";
      if (v.eviction_max_rows > 0) {
        absl::StrAppendFormat(&rule, "%smax %d rows", rule.empty() ? "" : ", ",
                              v.eviction_max_rows);
      }
      if (rule.empty()) rule = "memory budget";
      absl::StrAppendFormat(
          &admission, "%s%s: <span id=\"var-%d-evicted\">%d</span> evicted",
          admission.empty() ? "" : "; ", rule, i, v.evicted_rows);
    }
    if (v.ssd_tier) {
      absl::StrAppendFormat(
          &admission,
          "%sSSD tier: <span id=\"var-%d-spilled\">%d</span> rows on disk",
          admission.empty() ? "" : "; ", i, v.spilled_rows);
    }
    if (admission.empty()) admission = "&ndash;";
    absl::StrAppendFormat(
        &html,
        "<tr><td class=\"l\" id=\"var-%d-name\">%s</td><td class=\"l\">%s</td>"
        "<td id=\"var-%d-shards\">%d / %d</td><td id=\"var-%d-rows\">%d</td>"
        "<td id=\"var-%d-bytes\" data-bytes=\"%d\">%s</td>"
        "<td class=\"l\">%s</td></tr>",
        i, HtmlEscape(v.name), HtmlEscape(v.kind), i, v.local_shards,
        v.num_shards, i, v.local_rows, i, v.local_bytes, Mb(v.local_bytes),
        admission);
  }
  absl::StrAppend(&html, "</table>");

  absl::StrAppend(&html, "<h2>Bytes per PS</h2>", BalanceChart(d));
  int64_t least = -1, most = 0;
  for (int64_t b : d.bytes_per_ps) {
    most = std::max(most, b);
    least = least < 0 ? b : std::min(least, b);
  }
  absl::StrAppendFormat(&html,
                        "<p>max/min <span id=\"balance-ratio\">%.3f</span></p>",
                        least > 0 ? static_cast<double>(most) / least : 0.0);

  const double up = d.uptime_seconds;
  std::vector<double> recent = d.recent_rates;
  recent.resize(6, 0.0);
  absl::StrAppendFormat(
      &html,
      "<h2>Requests</h2><table id=\"requests\"><tr><th></th><th>total</th>"
      "<th>per second, last <span id=\"recent-seconds\">%.0f</span> s</th>"
      "<th>per second, mean since start</th></tr>"
      "<tr><td class=\"l\">pulls</td><td id=\"pull-requests\">%d</td>"
      "<td id=\"pull-rate\">%.1f</td><td>%.1f</td></tr>"
      "<tr><td class=\"l\">pushes</td><td id=\"push-requests\">%d</td>"
      "<td id=\"push-rate\">%.1f</td><td>%.1f</td></tr>"
      "<tr><td class=\"l\">rows pulled</td><td id=\"rows-pulled\">%d</td>"
      "<td>%.1f</td><td>%.1f</td></tr>"
      "<tr><td class=\"l\">rows pushed</td><td id=\"rows-pushed\">%d</td>"
      "<td>%.1f</td><td>%.1f</td></tr>"
      "<tr><td class=\"l\">MB in / out</td><td>%s / %s</td>"
      "<td>%.2f / %.2f</td><td>%.2f / %.2f</td></tr></table>",
      d.recent_seconds, d.pull_requests, recent[0],
      PerSecond(d.pull_requests, up), d.push_requests, recent[1],
      PerSecond(d.push_requests, up), d.rows_pulled, recent[2],
      PerSecond(d.rows_pulled, up), d.rows_pushed, recent[3],
      PerSecond(d.rows_pushed, up), Mb(d.bytes_in), Mb(d.bytes_out),
      recent[4] / 1e6, recent[5] / 1e6, PerSecond(d.bytes_in, up) / 1e6,
      PerSecond(d.bytes_out, up) / 1e6);

  absl::StrAppend(&html,
                  "<h2>Checkpoints saved by this PS</h2><table "
                  "id=\"checkpoints\"><tr><th>checkpoint</th><th>finished "
                  "(UTC)</th><th>MB</th><th>seconds</th><th>MB/s</th></tr>");
  for (size_t i = 0; i < d.checkpoints.size(); ++i) {
    const StatusPageData::Checkpoint& c = d.checkpoints[i];
    absl::StrAppendFormat(
        &html,
        "<tr><td class=\"l\" id=\"ckpt-%d-name\">%s</td><td>%s</td>"
        "<td id=\"ckpt-%d-bytes\" data-bytes=\"%d\">%s</td><td>%.2f</td>"
        "<td>%.1f</td></tr>",
        i, HtmlEscape(c.name),
        absl::FormatTime("%Y-%m-%d %H:%M:%S", c.finished, absl::UTCTimeZone()),
        i, c.bytes, Mb(c.bytes), c.seconds,
        c.seconds > 0 ? c.bytes / 1e6 / c.seconds : 0.0);
  }
  absl::StrAppend(&html, "</table>");

  absl::StrAppend(&html,
                  "<h2>Workers seen</h2><table id=\"workers\"><tr><th>worker"
                  "</th><th>last step pushed</th><th>seconds ago</th></tr>");
  for (const StatusPageData::Worker& w : d.workers) {
    absl::StrAppendFormat(&html,
                          "<tr><td id=\"worker-%d\">%d</td><td "
                          "id=\"worker-%d-step\">%d</td><td>%.1f</td></tr>",
                          w.index, w.index, w.index, w.last_step,
                          w.seconds_ago);
  }
  absl::StrAppend(&html,
                  "</table><p>Prometheus metrics: <a "
                  "href=\"/metrics\">/metrics</a></p></body></html>\n");
  return html;
}

}  // namespace psrt
