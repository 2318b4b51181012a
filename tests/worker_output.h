// Reads the numbers ps_worker prints (progress, eval and final lines), as a
// SageMaker metric_definitions regex would.
#ifndef PSRT_TESTS_WORKER_OUTPUT_H_
#define PSRT_TESTS_WORKER_OUTPUT_H_

#include <string>
#include <vector>

namespace psrt {

// Every value of `key=<number>` in `output`, in order.
std::vector<double> MetricValues(const std::string& output,
                                 const std::string& key);

// The last value of `key=<number>`, or -1.
double LastMetric(const std::string& output, const std::string& key);

}  // namespace psrt

#endif  // PSRT_TESTS_WORKER_OUTPUT_H_
