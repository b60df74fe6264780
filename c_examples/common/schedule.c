/*
 * schedule.c: the learning rate as a function of the step alone, so a
 * resumed run needs nothing but the step to continue the schedule.
 */
#include <math.h>

#include "trainer.h"

#define PI 3.141592653589793

double lr_at(const struct lr_schedule *s, uint64_t step)
{
    const double peak = s->peak, floor_lr = s->floor;
    const uint64_t warmup = s->warmup, iters = s->decay_end;
    if (step == 0) step = 1;
    if (step <= warmup) return peak * (double)step / (double)warmup;
    if (s->shape == SCHEDULE_CONSTANT) return peak;
    if (iters <= warmup) return floor_lr;
    double p = (double)(step - warmup) / (double)(iters - warmup);
    if (p > 1.0) p = 1.0;
    switch (s->shape) {
    case SCHEDULE_COSINE: return floor_lr + 0.5 * (1.0 + cos(PI * p)) * (peak - floor_lr);
    case SCHEDULE_LINEAR: return peak - (peak - floor_lr) * p;
    case SCHEDULE_CONSTANT: break;
    }
    return peak;
}

const char *schedule_name(enum schedule s)
{
    switch (s) {
    case SCHEDULE_CONSTANT: return "constant";
    case SCHEDULE_COSINE: return "cosine";
    case SCHEDULE_LINEAR: return "linear";
    }
    return "?";
}
