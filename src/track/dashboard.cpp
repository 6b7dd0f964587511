// `foundry dashboard`: the embedded page, a JSON API under /api/ and the ingest endpoint that
// `foundry runs sync` pushes to. `foundry runs sync` itself is at the end of this file, so the
// payload's shape is written and read in one place (docs/tracking.md, "Team sync").
#include <httplib.h>

#include <chrono>
#include <filesystem>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <thread>

#include "foundry/core/error.h"
#include "foundry/io/json_depth.h"
#include "foundry/track/tools.h"
#include "track/assets.h"
#include "track/util.h"

using nlohmann::json;

namespace foundry::track {

namespace {

constexpr const char* kTables[] = {"scalars", "histograms", "texts", "images"};
constexpr Series kSeries[] = {Series::Scalars, Series::Histograms, Series::Texts, Series::Images};

struct HttpError : std::runtime_error {
  int status;
  HttpError(int s, const std::string& m) : std::runtime_error(m), status(s) {}
};

void send_json(httplib::Response& res, const json& j, int status = 200) {
  res.status = status;
  res.set_content(j.dump(), "application/json");
}
void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
}

bool token_ok(const httplib::Request& req, const std::string& token) {
  if (token.empty()) return true;
  if (req.get_header_value("Authorization") == "Bearer " + token) return true;
  if (req.has_param("token") && req.get_param_value("token") == token) return true;
  std::string cookie = req.get_header_value("Cookie");
  return cookie.find("foundry_token=" + token) != std::string::npos;
}

// ---- ingest: validation of a sync payload, then one transaction
const json& field(const json& j, const char* name, json::value_t type, const char* where) {
  if (!j.is_object() || !j.contains(name)) throw HttpError(400, fmt::format("{}: missing field '{}'", where, name));
  const json& v = j[name];
  bool ok = v.type() == type || (type == json::value_t::number_float && v.is_number()) ||
            (type == json::value_t::number_integer && (v.is_number_integer() || v.is_number_unsigned()));
  if (!ok) throw HttpError(400, fmt::format("{}: field '{}' has the wrong type ({})", where, name, v.type_name()));
  return v;
}

double number_at(const json& row, size_t i, const char* where) {
  try {
    return json_to_double(row.at(i));
  } catch (const std::exception&) {
    throw HttpError(400, fmt::format("{}: column {} is not a number", where, i));
  }
}

RunRecord run_from_payload(const json& r, const std::string& origin) {
  RunRecord rec;
  rec.id = field(r, "id", json::value_t::string, "run").get<std::string>();
  if (!safe_run_id(rec.id))
    throw HttpError(400, "run: bad id (1-64 of A-Z a-z 0-9 _ . -, not starting with '.')");
  rec.project = field(r, "project", json::value_t::string, "run").get<std::string>();
  rec.name = field(r, "name", json::value_t::string, "run").get<std::string>();
  rec.status = field(r, "status", json::value_t::string, "run").get<std::string>();
  if (rec.status != "running" && rec.status != "finished" && rec.status != "failed" && rec.status != "crashed")
    throw HttpError(400, "run: unknown status '" + rec.status + "'");
  rec.created_at = field(r, "created_at", json::value_t::number_float, "run").get<double>();
  rec.updated_at = field(r, "updated_at", json::value_t::number_float, "run").get<double>();
  if (r.contains("finished_at") && r["finished_at"].is_number()) rec.finished_at = r["finished_at"].get<double>();
  if (r.contains("exit_code") && r["exit_code"].is_number_integer()) rec.exit_code = r["exit_code"].get<int64_t>();
  rec.host = r.value("host", "");
  rec.pid = r.contains("pid") && r["pid"].is_number_integer() ? r["pid"].get<int64_t>() : 0;
  rec.config_json = field(r, "config", json::value_t::object, "run").dump();
  rec.tags_json = field(r, "tags", json::value_t::array, "run").dump();
  rec.summary_json = field(r, "summary", json::value_t::object, "run").dump();
  rec.notes = r.contains("notes") && r["notes"].is_string() ? r["notes"].get<std::string>() : "";
  rec.origin = origin;
  return rec;
}

json ingest(Store& store, const json& body) {
  if (!body.is_object()) throw HttpError(400, "the body must be a JSON object");
  std::string origin = body.contains("origin") && body["origin"].is_string() ? body["origin"].get<std::string>() : "";
  if (origin.empty()) throw HttpError(400, "missing field 'origin' (the sender's host)");
  RunRecord rec = run_from_payload(field(body, "run", json::value_t::object, "payload"), origin);
  json received = json::object();
  store.transaction([&] {
    auto existing = store.find_run(rec.id);
    if (existing && existing->origin != origin)
      throw HttpError(409, fmt::format("run {} already exists here from another source", rec.id));
    if (existing) store.update_run(rec);
    else store.insert_run(rec);
    std::string remote = "from:" + origin;
    for (int t = 0; t < 4; ++t) {
      const char* table = kTables[t];
      if (!body.contains(table)) continue;
      const json& rows = body[table];
      if (!rows.is_array()) throw HttpError(400, fmt::format("'{}' must be an array of rows", table));
      int64_t mark = store.sync_mark(remote, rec.id, table), last = mark, n = 0;
      for (const json& row : rows) {
        std::string where = fmt::format("{} row", table);
        if (!row.is_array() || row.size() < 5 || !row[0].is_number_integer() || !row[1].is_string() ||
            !row[2].is_number_integer())
          throw HttpError(400, where + ": expected [rowid, key, step, wall_time, ...]");
        int64_t rowid = row[0].get<int64_t>();
        if (rowid <= mark) continue;  // already received: a re-sent batch is harmless
        std::string key = row[1].get<std::string>();
        int64_t step = row[2].get<int64_t>();
        double wall = number_at(row, 3, where.c_str());
        switch (kSeries[t]) {
          case Series::Scalars: store.insert_scalar(rec.id, key, {step, wall, number_at(row, 4, where.c_str())}); break;
          case Series::Histograms: {
            if (row.size() != 11 || !row[9].is_array() || !row[10].is_array())
              throw HttpError(400, where + ": expected 11 columns");
            HistogramPoint p{step, wall, {}};
            p.histogram.min = number_at(row, 4, where.c_str());
            p.histogram.max = number_at(row, 5, where.c_str());
            p.histogram.num = number_at(row, 6, where.c_str());
            p.histogram.sum = number_at(row, 7, where.c_str());
            p.histogram.sum_squares = number_at(row, 8, where.c_str());
            for (auto& v : row[9]) p.histogram.bucket_limits.push_back(json_to_double(v));
            for (auto& v : row[10]) p.histogram.bucket_counts.push_back(json_to_double(v));
            store.insert_histogram(rec.id, key, p);
            break;
          }
          case Series::Texts:
            if (!row[4].is_string()) throw HttpError(400, where + ": text must be a string");
            store.insert_text(rec.id, key, {step, wall, row[4].get<std::string>()});
            break;
          case Series::Images: {
            if (row.size() != 7 || !row[6].is_string()) throw HttpError(400, where + ": expected 7 columns");
            std::string png;
            try {
              png = base64_decode(row[6].get<std::string>());
            } catch (const std::exception& e) {
              throw HttpError(400, where + ": " + e.what());
            }
            store.insert_image(rec.id, key, {0, step, wall, int64_t(number_at(row, 4, "image")),
                                             int64_t(number_at(row, 5, "image")), png});
            break;
          }
        }
        last = std::max(last, rowid);
        ++n;
      }
      if (last > mark) store.set_sync_mark(remote, rec.id, table, last);
      received[table] = n;
    }
    if (body.contains("artifacts")) {
      const json& arts = body["artifacts"];
      if (!arts.is_array()) throw HttpError(400, "'artifacts' must be an array");
      auto have = store.artifacts(rec.id);
      for (const json& a : arts) {
        ArtifactRecord ar;
        ar.name = field(a, "name", json::value_t::string, "artifact").get<std::string>();
        ar.type = field(a, "type", json::value_t::string, "artifact").get<std::string>();
        ar.sha256 = field(a, "sha256", json::value_t::string, "artifact").get<std::string>();
        ar.size = field(a, "size", json::value_t::number_integer, "artifact").get<int64_t>();
        ar.logged_at = field(a, "logged_at", json::value_t::number_float, "artifact").get<double>();
        bool known = false;
        for (auto& h : have) known = known || (h.sha256 == ar.sha256 && h.name == ar.name);
        if (!known) store.insert_artifact(rec.id, ar);
      }
    }
  });
  return {{"ok", true}, {"run", rec.id}, {"received", received}};
}

json series_json(Store& store, const std::string& run_id, const std::string& kind, const std::string& key) {
  json points = json::array();
  if (kind == "scalars") {
    for (auto& p : store.scalars(run_id, key)) points.push_back({p.step, p.wall_time, json_number(p.value)});
  } else if (kind == "histograms") {
    for (auto& p : store.histograms(run_id, key)) {
      const Histogram& h = p.histogram;
      json limits = json::array(), counts = json::array();
      for (double v : h.bucket_limits) limits.push_back(json_number(v));
      for (double v : h.bucket_counts) counts.push_back(json_number(v));
      points.push_back({{"step", p.step}, {"wall_time", p.wall_time}, {"min", json_number(h.min)}, {"max", json_number(h.max)},
                        {"num", h.num}, {"sum", json_number(h.sum)}, {"sum_squares", json_number(h.sum_squares)},
                        {"bucket_limits", limits}, {"bucket_counts", counts}});
    }
  } else if (kind == "texts") {
    for (auto& p : store.texts(run_id, key)) points.push_back({{"step", p.step}, {"wall_time", p.wall_time}, {"text", p.text}});
  } else {
    for (auto& p : store.images(run_id, key))
      points.push_back({{"step", p.step}, {"wall_time", p.wall_time}, {"width", p.width}, {"height", p.height},
                        {"url", fmt::format("/api/images/{}", p.id)}});
  }
  return {{"run", run_id}, {"key", key}, {"points", points}};
}

}  // namespace

void serve_dashboard(const DashboardOptions& opt, const std::function<void(const std::string&)>& on_listening,
                     const std::atomic<bool>* stop) {
  if (!is_loopback(opt.host) && (!opt.allow_remote || opt.token.empty()))
    raise<ValueError>("dashboard: binding to {} exposes your runs to the network; pass --allow-remote and --token "
                      "to do that (default host is 127.0.0.1)",
                      opt.host);
  Store::open(opt.dir, /*create=*/true);  // fail now on a corrupt database, with its message
  httplib::Server svr;
  svr.set_payload_max_length(size_t(opt.max_body_bytes));
  std::string dir = opt.dir, token = opt.token;

  svr.set_pre_routing_handler([token](const httplib::Request& req, httplib::Response& res) {
    if (token_ok(req, token)) {
      if (!token.empty() && req.has_param("token"))  // the page keeps the token for its API calls
        res.set_header("Set-Cookie", "foundry_token=" + token + "; HttpOnly; SameSite=Strict; Path=/");
      return httplib::Server::HandlerResponse::Unhandled;
    }
    send_error(res, 401, "missing or wrong token (Authorization: Bearer TOKEN)");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr ep) {
    try {
      std::rethrow_exception(ep);
    } catch (const HttpError& e) {
      send_error(res, e.status, e.what());
    } catch (const ValueError& e) {
      send_error(res, 404, e.what());
    } catch (const json::exception& e) {
      send_error(res, 400, std::string("malformed JSON: ") + e.what());
    } catch (const std::exception& e) {
      send_error(res, 500, e.what());
    } catch (...) {
      send_error(res, 500, "unknown error");
    }
  });
  svr.set_error_handler([](const httplib::Request& req, httplib::Response& res) {
    if (!res.body.empty()) return;
    if (res.status == 413) send_error(res, 413, "request body too large");
    else if (res.status == 404) send_error(res, 404, "no such endpoint: " + req.path);
    else send_error(res, res.status, "request failed");
  });

  for (size_t i = 0; i < kDashboardAssetCount; ++i) {
    const Asset& a = kDashboardAssets[i];
    std::string mime = std::string(a.mime) + "; charset=utf-8";
    svr.Get(a.url, [a, mime](const httplib::Request&, httplib::Response& res) {
      res.set_content(reinterpret_cast<const char*>(a.data), a.size, mime.c_str());
      res.set_header("Cache-Control", "no-cache");
    });
  }
  // Each request opens its own connection: SQLite handles the concurrency, and a request never
  // waits on another's statement.
  svr.Get("/api/runs", [dir](const httplib::Request&, httplib::Response& res) {
    Store store = Store::open(dir, false);
    json runs = json::array();
    for (auto& r : store.runs()) runs.push_back(json::parse(run_json(store, r, false)));
    send_json(res, {{"runs", runs}});
  });
  svr.Get(R"(/api/runs/([^/]+))", [dir](const httplib::Request& req, httplib::Response& res) {
    Store store = Store::open(dir, false);
    store.runs();  // refresh crashed states
    auto r = store.find_run(req.matches[1]);
    if (!r) throw HttpError(404, "unknown run ID '" + std::string(req.matches[1]) + "'");
    send_json(res, json::parse(run_json(store, *r, true)));
  });
  svr.Get(R"(/api/runs/([^/]+)/(scalars|histograms|texts|images))",
          [dir](const httplib::Request& req, httplib::Response& res) {
            Store store = Store::open(dir, false);
            auto r = store.find_run(req.matches[1]);
            if (!r) throw HttpError(404, "unknown run ID '" + std::string(req.matches[1]) + "'");
            if (!req.has_param("key")) throw HttpError(400, "missing query parameter 'key'");
            send_json(res, series_json(store, r->id, req.matches[2], req.get_param_value("key")));
          });
  svr.Get(R"(/api/images/(\d+))", [dir](const httplib::Request& req, httplib::Response& res) {
    Store store = Store::open(dir, false);
    auto img = store.image(std::stoll(req.matches[1]));
    if (!img) throw HttpError(404, "no such image");
    res.set_content(img->png, "image/png");
  });
  svr.Post("/api/ingest", [dir, token](const httplib::Request& req, httplib::Response& res) {
    if (token.empty())
      throw HttpError(403, "this dashboard does not accept runs: start it with --token to enable sync");
    if (const int depth = io::json_depth(req.body); depth > io::kMaxJsonDepth)
      throw HttpError(400, fmt::format("the body nests {} levels deep; at most {} are accepted", depth, io::kMaxJsonDepth));
    json body = json::parse(req.body, nullptr, false);
    if (body.is_discarded()) throw HttpError(400, "malformed JSON body");
    Store store = Store::open(dir, false);
    send_json(res, ingest(store, body));
  });

  int port = opt.port;
  if (port == 0) {
    port = svr.bind_to_any_port(opt.host);
    if (port < 0) raise<IOError>("dashboard: cannot bind to {}", opt.host);
  } else if (!svr.bind_to_port(opt.host, port)) {
    raise<IOError>("dashboard: cannot listen on {}:{} (in use? try --port)", opt.host, port);
  }
  std::thread watcher;
  if (stop)
    watcher = std::thread([&] {
      while (!stop->load()) std::this_thread::sleep_for(std::chrono::milliseconds(100));
      svr.stop();
    });
  if (on_listening) on_listening(fmt::format("http://{}:{}", opt.host, port));
  svr.listen_after_bind();
  if (watcher.joinable()) watcher.join();
}

SyncResult sync_runs(const SyncOptions& opt) {
  if (opt.to.empty()) raise<ValueError>("sync: --to URL is required (http://host:port of a dashboard)");
  if (opt.to.rfind("http://", 0) != 0 && opt.to.rfind("https://", 0) != 0)
    raise<ValueError>("sync: --to must start with http:// or https://, got '{}'", opt.to);
  if (opt.batch_rows < 1) raise<ValueError>("sync: batch_rows must be positive");
  Store store = Store::open(opt.dir, false);
  std::vector<RunRecord> runs = opt.run.empty() ? store.runs() : std::vector<RunRecord>{store.run(opt.run)};
  httplib::Client client(opt.to);
  client.set_connection_timeout(10);
  client.set_read_timeout(120);
  if (!opt.token.empty()) client.set_bearer_token_auth(opt.token);
  std::string origin = host_name() + ":" + std::filesystem::absolute(store.db_path()).string();
  SyncResult result;
  for (auto& r : runs) {
    if (!r.origin.empty()) continue;  // only our own runs travel on
    ++result.runs;
    bool first = true;
    for (;;) {
      json body = {{"origin", origin}, {"run", json::parse(run_json(store, r, false))}};
      int64_t marks[4], lasts[4], total = 0;
      for (int t = 0; t < 4; ++t) {
        marks[t] = store.sync_mark(opt.to, r.id, kTables[t]);
        int64_t count = 0;
        body[kTables[t]] = json::parse(store.rows_after_json(r.id, kSeries[t], marks[t], opt.batch_rows, &lasts[t], &count));
        total += count;
      }
      if (first) {
        json arts = json::array();
        for (auto& a : store.artifacts(r.id))
          arts.push_back({{"name", a.name}, {"type", a.type}, {"sha256", a.sha256}, {"size", a.size}, {"logged_at", a.logged_at}});
        body["artifacts"] = arts;
      }
      if (total == 0 && !first) break;
      auto res = client.Post("/api/ingest", body.dump(), "application/json");
      ++result.requests;
      if (!res) raise<IOError>("sync: cannot reach {}: {}", opt.to, httplib::to_string(res.error()));
      if (res->status != 200) {
        json err = io::json_depth(res->body) <= io::kMaxJsonDepth ? json::parse(res->body, nullptr, false) : json();
        raise<IOError>("sync: {} answered {}: {}", opt.to, res->status,
                       err.is_object() && err.contains("error") ? err["error"].dump() : res->body.substr(0, 200));
      }
      store.transaction([&] {
        for (int t = 0; t < 4; ++t)
          if (lasts[t] > marks[t]) store.set_sync_mark(opt.to, r.id, kTables[t], lasts[t]);
      });
      result.rows += total;
      first = false;
      if (total == 0) break;
    }
  }
  return result;
}

}  // namespace foundry::track
