//! Stan's warm-up: dual averaging of the log step size towards a target
//! acceptance statistic, and the windowed estimate of a diagonal inverse
//! metric (a fast window, then slow windows doubling in length, the last
//! stretched to the terminal window).

/// Nesterov dual averaging of log step size (Hoffman and Gelman 2014).
#[derive(Clone, Debug, Default)]
pub struct DualAveraging {
    mu: f64,
    s_bar: f64,
    x_bar: f64,
    counter: u32,
}

/// The dual averaging constants (Stan's defaults in [`Default`]).
#[derive(Clone, Copy, Debug)]
pub struct DualAveragingConstants {
    /// The acceptance statistic aimed at.
    pub target_accept: f64,
    pub gamma: f64,
    pub kappa: f64,
    pub t0: f64,
}

impl Default for DualAveragingConstants {
    fn default() -> Self {
        DualAveragingConstants {
            target_accept: 0.8,
            gamma: 0.05,
            kappa: 0.75,
            t0: 10.0,
        }
    }
}

impl DualAveraging {
    /// Starts over from step size `eps`, aiming the averages at 10 eps.
    pub fn restart(&mut self, eps: f64) {
        *self = DualAveraging {
            mu: (10.0 * eps).ln(),
            ..DualAveraging::default()
        };
    }

    /// Learns from one transition's acceptance statistic; the next step size.
    pub fn learn(&mut self, c: &DualAveragingConstants, accept: f64) -> f64 {
        self.counter += 1;
        let accept = accept.min(1.0);
        let n = f64::from(self.counter);
        let eta = 1.0 / (n + c.t0);
        self.s_bar = (1.0 - eta) * self.s_bar + eta * (c.target_accept - accept);
        let x = self.mu - self.s_bar * n.sqrt() / c.gamma;
        let x_eta = n.powf(-c.kappa);
        self.x_bar = (1.0 - x_eta) * self.x_bar + x_eta * x;
        x.exp()
    }

    /// The averaged step size, used after warm-up.
    pub fn final_step_size(&self) -> f64 {
        self.x_bar.exp()
    }
}

/// The schedule of the metric's windows and the running variance of the
/// current one (Welford).
#[derive(Clone, Debug)]
pub struct MetricWindows {
    warmup: u32,
    init_buffer: u32,
    term_buffer: u32,
    window_size: u32,
    next_window: u32,
    mean: Vec<f64>,
    m2: Vec<f64>,
    count: u32,
}

impl MetricWindows {
    /// Stan's schedule for `warmup` iterations: buffers of `init_buffer`
    /// and `term_buffer` around windows starting at `base_window`, shrunk
    /// to 15% / 75% / 10% of a warm-up too short for them; below 20
    /// iterations the metric is not adapted.
    pub fn new(
        dim: usize,
        warmup: u32,
        init_buffer: u32,
        term_buffer: u32,
        base_window: u32,
    ) -> Self {
        let (mut init, mut term, mut base) = (init_buffer, term_buffer, base_window);
        if warmup < 20 {
            (init, term, base) = (warmup, 0, 0);
        } else if init + term + base > warmup {
            init = (0.15 * f64::from(warmup)) as u32;
            term = (0.1 * f64::from(warmup)) as u32;
            base = warmup - init - term;
        }
        MetricWindows {
            warmup,
            init_buffer: init,
            term_buffer: term,
            window_size: base,
            next_window: (init + base).saturating_sub(1),
            mean: vec![0.0; dim],
            m2: vec![0.0; dim],
            count: 0,
        }
    }

    /// Adds warm-up iteration `it`'s position; at the end of a window
    /// writes the regularised variances to `inv_metric`, starts the next
    /// window and returns true (the step size is then re-initialised).
    pub fn observe(&mut self, it: u32, q: &[f64], inv_metric: &mut [f64]) -> bool {
        let in_window =
            self.window_size > 0 && it >= self.init_buffer && it < self.warmup - self.term_buffer;
        if !in_window {
            return false;
        }
        self.count += 1;
        let n = f64::from(self.count);
        for ((m, m2), &x) in self.mean.iter_mut().zip(&mut self.m2).zip(q) {
            let d = x - *m;
            *m += d / n;
            *m2 += d * (x - *m);
        }
        if it != self.next_window {
            return false;
        }
        let end = self.warmup - self.term_buffer - 1;
        if self.next_window != end {
            self.window_size *= 2;
            self.next_window = it + self.window_size;
            if self.next_window != end
                && self.next_window + 2 * self.window_size >= self.warmup - self.term_buffer
            {
                self.next_window = end;
            }
        }
        for ((v, m), m2) in inv_metric.iter_mut().zip(&mut self.mean).zip(&mut self.m2) {
            let var = *m2 / (n - 1.0);
            *v = (n / (n + 5.0)) * var + 1e-3 * (5.0 / (n + 5.0));
            *m = 0.0;
            *m2 = 0.0;
        }
        self.count = 0;
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn windows_follow_stans_schedule() {
        // 1000 warm-up iterations: windows end at 99, 149, 249, 449, 949.
        let mut w = MetricWindows::new(1, 1000, 75, 50, 25);
        let mut m = [1.0];
        let ends: Vec<u32> = (0..1000)
            .filter(|&it| w.observe(it, &[f64::from(it % 7)], &mut m))
            .collect();
        assert_eq!(ends, [99, 149, 249, 449, 949]);
        assert!(m[0] > 1.0 && m[0] < 5.0, "variance of 0..7: {}", m[0]);
    }

    #[test]
    fn dual_averaging_moves_the_step_size_towards_the_target() {
        let c = DualAveragingConstants::default();
        let mut d = DualAveraging::default();
        d.restart(1.0);
        // always accepting: the step size grows
        let eps = (0..50).map(|_| d.learn(&c, 1.0)).last().unwrap();
        assert!(eps > 1.0);
        d.restart(1.0);
        let eps = (0..50).map(|_| d.learn(&c, 0.1)).last().unwrap();
        assert!(eps < 1.0);
    }
}
