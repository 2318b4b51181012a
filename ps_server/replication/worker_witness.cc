#include "ps_server/replication/worker_witness.h"

#include <algorithm>

#include "absl/time/clock.h"
#include "glog/logging.h"
#include "grpcpp/client_context.h"
#include "proto/ps.grpc.pb.h"

namespace psrt {

WorkerWitness::WorkerWitness(int worker, int num_ps,
                             std::unique_ptr<PeerTransport> transport,
                             Options options)
    : worker_(worker),
      num_ps_(num_ps),
      transport_(std::move(transport)),
      options_(options),
      clock_(options.clock != nullptr ? options.clock : Clock::Real()),
      ps_(num_ps),
      terms_(num_ps, 0) {
  const absl::Time now = clock_->Now();
  // Nobody is voted out before a lease term of silence from now.
  for (PsState& ps : ps_) ps.answered_at = now;
  for (int ps = 0; ps < num_ps_; ++ps) {
    threads_.emplace_back([this, ps] { Run(ps); });
  }
}

WorkerWitness::~WorkerWitness() {
  stop_.Notify();
  for (std::thread& t : threads_) t.join();
}

bool WorkerWitness::MayVoteOutLocked(int task, absl::Time now) const {
  const PsState& ps = ps_[task];
  return !ps.declined && now - ps.answered_at >= options_.term &&
         (ps.granted_at == absl::InfinitePast() ||
          now - ps.granted_at >= options_.term);
}

WitnessRequest WorkerWitness::NextRequestLocked(int ps, absl::Time now) {
  WitnessRequest request;
  request.set_worker(worker_);
  PsState& to = ps_[ps];
  request.set_challenge(to.challenge);
  const bool failed_over = terms_[ps] % 2 == 1;
  const bool holding_vote = to.voted_out_at != absl::InfinitePast() &&
                            now - to.voted_out_at < options_.vote_hold;
  if (to.challenge != 0 && !failed_over && !holding_vote) {
    request.set_grant(true);
    to.granted_at = now;  // before it is sent: the promise starts here
  }
  // A challenge is granted once: a PS that stops answering gets no more
  // grants, so a lease term later this worker may vote it out.
  to.challenge = 0;
  for (int task = 0; task < num_ps_; ++task) {
    if (task == ps || !MayVoteOutLocked(task, now)) continue;
    request.add_unreachable(task);
    if (ps_[task].voted_out_at == absl::InfinitePast() ||
        now - ps_[task].voted_out_at >= options_.vote_hold) {
      LOG(WARNING) << "worker " << worker_ << " votes PS " << task
                   << " unreachable (no answer for "
                   << absl::FormatDuration(now - ps_[task].answered_at)
                   << "); it grants it no lease for "
                   << absl::FormatDuration(options_.vote_hold);
    }
    ps_[task].voted_out_at = now;
  }
  for (const auto& [primary, view] : views_) {
    (*request.mutable_views())[primary] = view;
  }
  for (int task = 0; task < num_ps_; ++task) {
    if (terms_[task] != 0) (*request.mutable_ps_terms())[task] = terms_[task];
  }
  return request;
}

void WorkerWitness::Run(int ps) {
  do {
    const absl::Time sent = clock_->Now();
    WitnessRequest request;
    {
      absl::MutexLock lock(&mu_);
      request = NextRequestLocked(ps, sent);
    }
    grpc::ClientContext context;
    context.set_deadline(
        absl::ToChronoTime(absl::Now() + options_.call_timeout));
    WitnessResponse answer;
    const grpc::Status s = ParameterServer::NewStub(transport_->ChannelTo(ps))
                               ->Witness(&context, request, &answer);
    {
      absl::MutexLock lock(&mu_);
      PsState& from = ps_[ps];
      if (s.ok()) {
        ++answers_;
        from.answered_at = std::max(from.answered_at, clock_->Now());
        from.challenge = answer.challenge();
        for (const auto& [task, term] : answer.ps_terms()) {
          if (task >= 0 && task < num_ps_) {
            terms_[task] = std::max(terms_[task], term);
          }
        }
        StreamView& view = views_[ps];
        if (answer.view().version() > view.version()) view = answer.view();
      } else if (s.error_code() == grpc::StatusCode::FAILED_PRECONDITION ||
                 s.error_code() == grpc::StatusCode::INVALID_ARGUMENT ||
                 s.error_code() == grpc::StatusCode::UNIMPLEMENTED) {
        from.declined = true;
        LOG(INFO) << "worker " << worker_ << ": PS " << ps
                  << " takes no votes from workers (" << s.error_message()
                  << ")";
        return;
      }
    }
    const absl::Time next = sent + options_.renew_every;
    const absl::Time now = clock_->Now();
    if (next > now && clock_->WaitForNotification(stop_, next - now)) return;
  } while (!stop_.HasBeenNotified());
}

int WorkerWitness::voting_with() const {
  absl::MutexLock lock(&mu_);
  int n = 0;
  for (const PsState& ps : ps_) n += !ps.declined;
  return n;
}

bool WorkerWitness::VotesOut(int task) const {
  absl::MutexLock lock(&mu_);
  if (task < 0 || task >= num_ps_) return false;
  const PsState& ps = ps_[task];
  return ps.voted_out_at != absl::InfinitePast() &&
         clock_->Now() - ps.voted_out_at < options_.vote_hold &&
         MayVoteOutLocked(task, clock_->Now());
}

int64_t WorkerWitness::answers() const {
  absl::MutexLock lock(&mu_);
  return answers_;
}

}  // namespace psrt
