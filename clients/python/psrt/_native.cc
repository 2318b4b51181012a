// psrt._native: the Python binding of psrt::Client (clients/cpp/client.h)
// and of the catalog's layout, so that Python runs the one client there is.
//
// Every call that waits on the network releases the GIL. Importing it tunes
// glibc malloc as psrt's binaries do (proto/buffer_pool.h). numpy arrays cross
// without copies: ids and gradients are read from the caller's arrays, and
// pulled values are written into arrays the caller allocated; a pending
// call holds references to them until it has finished. Errors are raised
// as _native.Error with args (code, message, ps task or -1, local): `local`
// is true when the client refused the call before sending anything (the
// Python layer raises ValueError for those, PsError for the rest).
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "clients/cpp/client.h"
#include "clients/cpp/ps_task_status.h"
#include "partitioner/id_hash.h"
#include "partitioner/shard_map.h"
#include "partitioner/variable_spec.h"
#include "proto/buffer_pool.h"
#include "proto/ps.pb.h"

namespace py = pybind11;

namespace psrt {
namespace {

PyObject* error_type = nullptr;  // _native.Error

[[noreturn]] void Raise(const absl::Status& s, bool local = false) {
  py::tuple args =
      py::make_tuple(static_cast<int>(s.code()), std::string(s.message()),
                     PsTaskOf(s).value_or(-1), local);
  PyErr_SetObject(error_type, args.ptr());
  throw py::error_already_set();
}

void Check(const absl::Status& s) {
  if (!s.ok()) Raise(s);
}

template <typename Message>
Message Parse(const py::bytes& data, const char* what) {
  Message message;
  if (!message.ParseFromString(std::string(data))) {
    throw py::value_error(absl::StrCat("not a serialized ", what));
  }
  return message;
}

template <typename Message>
py::bytes Serialize(const Message& message) {
  return py::bytes(message.SerializeAsString());
}

// A C-contiguous array of T, checked (it is about to be read or written by
// C++ without Python's bounds checks).
template <typename T>
T* Data(const py::array& a, const std::string& variable, const char* what,
        bool writable) {
  if (!a.dtype().is(py::dtype::of<T>()) || !(a.flags() & py::array::c_style) ||
      (writable && !a.writeable())) {
    throw py::type_error(absl::StrCat(
        "'", variable, "': ", what, " must be a C-contiguous ",
        writable ? "writable " : "",
        py::str(py::dtype::of<T>()).cast<std::string>(), " array"));
  }
  return static_cast<T*>(const_cast<void*>(a.data()));
}

// The floats one op's buffer holds for `v`: the whole variable, or a row
// per id.
int64_t Floats(const VariableLayout& v, int64_t num_ids) {
  return v.kind() == DENSE ? v.rows * v.row_width : num_ids * v.row_width;
}

void CheckSize(const py::array& a, int64_t want, const std::string& variable,
               const char* what) {
  if (a.size() != want) {
    throw py::value_error(absl::StrCat("'", variable, "': ", what, " holds ",
                                       a.size(), " floats, expected ", want));
  }
}

// A pull or push in flight: wait() blocks without the GIL.
class Pending {
 public:
  Pending(std::shared_ptr<Client> client, std::vector<py::object> buffers,
          std::unique_ptr<PendingCall> call)
      : client_(std::move(client)),
        buffers_(std::move(buffers)),
        call_(std::move(call)) {}
  ~Pending() {
    py::gil_scoped_release release;
    call_.reset();  // waits; before the buffers it writes go
    client_.reset();
  }

  void Wait() {
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = call_->Wait();
    }
    Check(s);
  }
  int64_t sync_step() const { return call_->sync_step(); }

 private:
  std::shared_ptr<Client> client_;   // outlives the call, even if closed
  std::vector<py::object> buffers_;  // the arrays the call reads or fills
  std::unique_ptr<PendingCall> call_;
};

class PyClient {
 public:
  PyClient(std::vector<std::string> addresses, double timeout, int max_attempts,
           int channels_per_ps, double failover_wait, std::string tls_ca_file,
           std::string tls_cert_file, std::string tls_key_file,
           std::string auth_token, int wire_dtype, int mode, int workers,
           int staleness, double sync_timeout, int worker_index,
           int witness_index, std::string data_plane,
           std::vector<std::string> data_plane_providers) {
    ClientOptions options;
    options.ps_addresses = std::move(addresses);
    options.call_timeout = absl::Seconds(timeout);
    options.max_attempts = max_attempts;
    options.channels_per_ps = std::max(1, channels_per_ps);
    options.failover_wait = absl::Seconds(failover_wait);
    options.security.tls_ca_file = std::move(tls_ca_file);
    options.security.tls_cert_file = std::move(tls_cert_file);
    options.security.tls_key_file = std::move(tls_key_file);
    options.security.auth_token = std::move(auth_token);
    if (!WireDtype_IsValid(wire_dtype)) {
      throw py::value_error(absl::StrCat("unknown wire dtype ", wire_dtype));
    }
    options.wire_dtype = static_cast<WireDtype>(wire_dtype);
    if (data_plane != "fabric" && data_plane != "grpc") {
      throw py::value_error(
          absl::StrCat("data_plane ", data_plane, ": expected fabric or grpc"));
    }
    options.data_plane = std::move(data_plane);
    if (data_plane_providers.empty() ||
        std::find(data_plane_providers.begin(), data_plane_providers.end(),
                  "") != data_plane_providers.end()) {
      throw py::value_error(
          "data_plane_providers: name one provider or more (shm, tcp)");
    }
    options.data_plane_providers = std::move(data_plane_providers);
    options.worker_index = worker_index;
    options.witness_index = witness_index;
    if (!Consistency::Mode_IsValid(mode)) {
      throw py::value_error(absl::StrCat("unknown mode ", mode));
    }
    if (mode != Consistency::ASYNC) {  // async: no step fields, as C++'s
      step_.consistency.set_mode(static_cast<Consistency::Mode>(mode));
      step_.consistency.set_workers(workers);
      step_.consistency.set_staleness(staleness);
      step_.consistency.set_timeout_seconds(sync_timeout);
    }
    auto client = Client::Connect(std::move(options));
    if (!client.ok()) Raise(client.status(), /*local=*/true);
    client_ = std::move(*client);
  }

  ~PyClient() { Close(); }

  // Taken with the GIL held (so a concurrent call sees the client or
  // nothing); destroyed without it, once the calls holding it are done.
  void Close() {
    std::shared_ptr<Client> closing = std::move(client_);
    py::gil_scoped_release release;
    closing.reset();
  }

  // The client, shared for the length of a call: a close() from another
  // thread cannot destroy it under the call.
  std::shared_ptr<Client> client() const {
    if (client_ == nullptr) throw py::value_error("the client is closed");
    return client_;
  }

  void WaitForServers(double timeout) {
    const std::shared_ptr<Client> shared = client();
    Client& c = *shared;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = c.WaitForServers(absl::Seconds(timeout));
    }
    Check(s);
  }

  void CreateVariables(const std::vector<py::bytes>& serialized) {
    std::vector<VariableSpec> specs;
    for (const py::bytes& b : serialized) {
      specs.push_back(Parse<VariableSpec>(b, "VariableSpec"));
    }
    const std::shared_ptr<Client> shared = client();
    Client& c = *shared;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = c.CreateVariables(std::move(specs));
    }
    Check(s);
  }

  void RefreshCatalog() {
    const std::shared_ptr<Client> shared = client();
    Client& c = *shared;
    absl::Status s;
    {
      py::gil_scoped_release release;
      s = c.RefreshCatalog();
    }
    Check(s);
  }

  // A copy of the variable's layout, refreshing the catalog once when it
  // is unknown (someone else may have created it); None if the cluster has
  // no such variable.
  std::optional<VariableLayout> Layout(const std::string& name) {
    const std::shared_ptr<Client> shared = client();
    const VariableLayout* v = shared->Find(name);
    if (v == nullptr) {
      RefreshCatalog();
      v = shared->Find(name);
    }
    if (v == nullptr) return std::nullopt;
    return *v;
  }

  // ops: [(name, ids int64 array or None, out float32 array)].
  std::unique_ptr<Pending> StartPull(const py::list& ops, int64_t step) {
    std::vector<PullOp> pulls;
    std::vector<py::object> buffers;
    for (const py::handle op : ops) {
      auto [name, ids, out] =
          op.cast<std::tuple<std::string, py::object, py::array>>();
      PullOp pull;
      pull.variable = name;
      pull.ids = Ids(name, ids, &buffers);
      pull.out = Data<float>(out, name, "the output", /*writable=*/true);
      CheckBuffer(name, pull.ids.size(), out, "the output");
      buffers.push_back(out);
      pulls.push_back(std::move(pull));
    }
    return Start(/*push=*/false, std::move(pulls), {}, std::move(buffers),
                 step);
  }

  // ops: [(name, ids int64 array or None, grads float32 array, lr)].
  std::unique_ptr<Pending> StartPush(const py::list& ops, int64_t step) {
    std::vector<PushOp> pushes;
    std::vector<py::object> buffers;
    for (const py::handle op : ops) {
      auto [name, ids, grads, learning_rate] =
          op.cast<std::tuple<std::string, py::object, py::array, float>>();
      PushOp push;
      push.variable = name;
      push.ids = Ids(name, ids, &buffers);
      push.grad = Data<float>(grads, name, "the gradient", /*writable=*/false);
      push.learning_rate = learning_rate;
      CheckBuffer(name, push.ids.size(), grads, "the gradient");
      buffers.push_back(grads);
      pushes.push_back(std::move(push));
    }
    return Start(/*push=*/true, {}, std::move(pushes), std::move(buffers),
                 step);
  }

  std::vector<py::bytes> ListVariables() {
    return PerPs<ListVariablesResponse>(
        [](Client& c) { return c.ListVariables(); });
  }
  std::vector<py::bytes> Stats() {
    return PerPs<StatsResponse>([](Client& c) { return c.Stats(); });
  }

  py::bytes Checkpoint(const std::string& uri, double timeout) {
    const std::shared_ptr<Client> shared = client();
    Client& c = *shared;
    absl::StatusOr<CheckpointResponse> response;
    {
      py::gil_scoped_release release;
      response = c.Checkpoint(uri, absl::Seconds(timeout));
    }
    Check(response.status());
    return Serialize(*response);
  }

 private:
  absl::Span<const int64_t> Ids(const std::string& name, const py::object& ids,
                                std::vector<py::object>* buffers) {
    if (ids.is_none()) return {};
    py::array a = ids.cast<py::array>();
    const int64_t* data = Data<int64_t>(a, name, "ids", /*writable=*/false);
    buffers->push_back(a);
    return absl::MakeConstSpan(data, a.size());
  }

  // The buffer holds what the op's variable needs, checked against the
  // catalog (an unknown variable is left to the client, which names it).
  void CheckBuffer(const std::string& name, size_t num_ids,
                   const py::array& buffer, const char* what) {
    const VariableLayout* v = client()->Find(name);
    if (v == nullptr) return;
    if (v->kind() != DENSE && num_ids == 0 && buffer.size() == 0) return;
    CheckSize(buffer, Floats(*v, static_cast<int64_t>(num_ids)), name, what);
  }

  std::unique_ptr<Pending> Start(bool push, std::vector<PullOp> pulls,
                                 std::vector<PushOp> pushes,
                                 std::vector<py::object> buffers,
                                 int64_t step) {
    const std::shared_ptr<Client> shared = client();
    Client& c = *shared;
    StepOptions options = step_;
    options.step = step;
    absl::StatusOr<std::unique_ptr<PendingCall>> call;
    {
      py::gil_scoped_release release;
      call = push ? c.StartPush(pushes, options) : c.StartPull(pulls, options);
    }
    if (!call.ok()) Raise(call.status(), /*local=*/true);
    return std::make_unique<Pending>(shared, std::move(buffers),
                                     std::move(*call));
  }

  template <typename Response, typename Call>
  std::vector<py::bytes> PerPs(Call call) {
    const std::shared_ptr<Client> shared = client();
    Client& c = *shared;
    absl::StatusOr<std::vector<Response>> responses;
    {
      py::gil_scoped_release release;
      responses = call(c);
    }
    Check(responses.status());
    std::vector<py::bytes> out;
    for (const Response& r : *responses) out.push_back(Serialize(r));
    return out;
  }

  std::shared_ptr<Client> client_;  // shared with calls in flight
  StepOptions step_;
};

py::array_t<int32_t> ShardOf(
    const VariableLayout& v,
    const py::array_t<int64_t, py::array::c_style | py::array::forcecast>&
        ids) {
  py::array_t<int32_t> out(ids.size());
  const int64_t* in = ids.data();
  int32_t* shard = out.mutable_data();
  for (py::ssize_t i = 0; i < ids.size(); ++i) {
    if (v.kind() != HASH_EMBEDDING && (in[i] < 0 || in[i] >= v.rows)) {
      throw py::value_error(absl::StrCat("'", v.spec.name(), "': id ", in[i],
                                         " is outside [0, ", v.rows, ")"));
    }
    shard[i] = v.ShardOf(in[i]);
  }
  return out;
}

}  // namespace
}  // namespace psrt

PYBIND11_MODULE(_native, m) {
  using namespace psrt;
  m.doc() = "The C++ client of psrt, bound for the psrt package.";
  // As every psrt process: freed message buffers stay in the heap rather
  // than being faulted in afresh (PSRT_KEEP_MALLOC_DEFAULTS=1 opts out).
  TuneAllocatorForLargeMessages();
  static py::exception<std::runtime_error> error(m, "Error");
  error_type = error.ptr();

  m.def(
      "normalize",
      [](const py::bytes& spec) {
        VariableSpec normalized = Parse<VariableSpec>(spec, "VariableSpec");
        if (absl::Status s = NormalizeVariableSpec(&normalized); !s.ok()) {
          throw py::value_error(std::string(s.message()));
        }
        return Serialize(normalized);
      },
      "A VariableSpec (serialized) normalized as the servers do; ValueError "
      "naming what is wrong.");
  m.def(
      "mix_id",
      [](const py::array_t<int64_t, py::array::c_style | py::array::forcecast>&
             ids) {
        py::array_t<uint64_t> out(ids.size());
        for (py::ssize_t i = 0; i < ids.size(); ++i) {
          out.mutable_data()[i] = MixId(ids.data()[i]);
        }
        return out;
      },
      "The protocol's id hash (partitioner/id_hash.h) of each id.");

  py::class_<ShardLayout>(m, "Shard")
      .def_readonly("shard", &ShardLayout::shard)
      .def_readonly("ps_task", &ShardLayout::ps_task)
      .def_readonly("row_begin", &ShardLayout::row_begin)
      .def_readonly("num_rows", &ShardLayout::num_rows)
      .def("__repr__", [](const ShardLayout& s) {
        return absl::StrCat("Shard(", s.shard, ", ps_task=", s.ps_task,
                            ", rows=[", s.row_begin, ", +", s.num_rows, "))");
      });
  py::class_<VariableLayout>(m, "Layout", py::dynamic_attr())
      .def_property_readonly(
          "name", [](const VariableLayout& v) { return v.spec.name(); })
      .def_property_readonly(
          "kind",
          [](const VariableLayout& v) { return static_cast<int>(v.kind()); })
      .def_property_readonly(
          "spec_bytes",
          [](const VariableLayout& v) { return Serialize(v.spec); })
      .def_readonly("index", &VariableLayout::index)
      .def_readonly("rows", &VariableLayout::rows)
      .def_readonly("row_width", &VariableLayout::row_width)
      .def_readonly("shards", &VariableLayout::shards)
      .def("shard_of", &ShardOf, "The shard of each id.");
  py::class_<ShardMap>(m, "ShardMap")
      .def(py::init<int>())
      .def("add",
           [](ShardMap& map, const py::bytes& spec) {
             VariableSpec s = Parse<VariableSpec>(spec, "VariableSpec");
             if (absl::Status n = NormalizeVariableSpec(&s); !n.ok()) {
               throw py::value_error(std::string(n.message()));
             }
             Check(map.Add(s));
           })
      .def(
          "find",
          [](const ShardMap& map, const std::string& name) {
            return map.Find(name);
          },
          py::return_value_policy::reference_internal)
      .def_property_readonly(
          "variables",
          [](const ShardMap& map) {
            std::vector<const VariableLayout*> out;
            for (const VariableLayout& v : map.variables()) out.push_back(&v);
            return out;
          },
          py::return_value_policy::reference_internal);

  py::class_<Pending>(m, "Pending")
      .def("wait", &Pending::Wait)
      .def_property_readonly("sync_step", &Pending::sync_step);
  py::class_<PyClient>(m, "Client")
      .def(py::init<std::vector<std::string>, double, int, int, double,
                    std::string, std::string, std::string, std::string, int,
                    int, int, int, double, int, int, std::string,
                    std::vector<std::string>>(),
           py::arg("addresses"), py::arg("timeout"), py::arg("max_attempts"),
           py::arg("channels_per_ps"), py::arg("failover_wait"),
           py::arg("tls_ca_file"), py::arg("tls_cert_file"),
           py::arg("tls_key_file"), py::arg("auth_token"),
           py::arg("wire_dtype"), py::arg("mode"), py::arg("workers"),
           py::arg("staleness"), py::arg("sync_timeout"),
           py::arg("worker_index"), py::arg("witness_index"),
           py::arg("data_plane"), py::arg("data_plane_providers"))
      .def("close", &PyClient::Close)
      .def("wait_for_servers", &PyClient::WaitForServers)
      .def("create_variables", &PyClient::CreateVariables)
      .def("refresh_catalog", &PyClient::RefreshCatalog)
      .def("layout", &PyClient::Layout)
      .def("start_pull", &PyClient::StartPull)
      .def("start_push", &PyClient::StartPush)
      .def("list_variables", &PyClient::ListVariables)
      .def("stats", &PyClient::Stats)
      .def("checkpoint", &PyClient::Checkpoint)
      .def("serving", [](PyClient& c, int ps) {
        if (ps < 0 || ps >= c.client()->num_ps())
          throw py::index_error("no such PS");
        return c.client()->ServingPs(ps);
      });
}
