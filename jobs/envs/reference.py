#!/usr/bin/env python3
"""Computes the values envs_test.cpp pins, from Gymnasium's equations (classic_control/cartpole.py
and acrobot.py) transcribed in plain Python floats (math.cos; no NumPy, no Gymnasium, no envs.hpp).
Run: python3 jobs/envs/reference.py; each line names the test that uses it."""
from math import cos, sin, pi

M64 = (1 << 64) - 1


class SplitMix64:
    def __init__(self, seed):
        self.x = seed

    def next(self):
        self.x = (self.x + 0x9E3779B97F4A7C15) & M64
        z = self.x
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
        return z ^ (z >> 31)

    def uniform(self, lo, hi):
        return lo + (hi - lo) * ((self.next() >> 11) * 2.0**-53)


def cartpole_step(state, action):
    gravity, masscart, masspole, length, force_mag, tau = 9.8, 1.0, 0.1, 0.5, 10.0, 0.02
    x, x_dot, theta, theta_dot = state
    force = force_mag if action == 1 else -force_mag
    total_mass = masspole + masscart
    polemass_length = masspole * length
    c, s = cos(theta), sin(theta)
    temp = (force + polemass_length * theta_dot**2 * s) / total_mass
    thetaacc = (gravity * s - c * temp) / (length * (4.0 / 3.0 - masspole * c**2 / total_mass))
    xacc = temp - polemass_length * thetaacc * c / total_mass
    return (x + tau * x_dot, x_dot + tau * xacc, theta + tau * theta_dot, theta_dot + tau * thetaacc)


def cartpole_terminated(state):
    return abs(state[0]) > 2.4 or abs(state[2]) > 12 * 2 * pi / 360


def acrobot_dsdt(s, a):
    m1 = m2 = 1.0
    l1 = 1.0
    lc1 = lc2 = 0.5
    I1 = I2 = 1.0
    g = 9.8
    theta1, theta2, dtheta1, dtheta2 = s
    d1 = m1 * lc1**2 + m2 * (l1**2 + lc2**2 + 2 * l1 * lc2 * cos(theta2)) + I1 + I2
    d2 = m2 * (lc2**2 + l1 * lc2 * cos(theta2)) + I2
    phi2 = m2 * lc2 * g * cos(theta1 + theta2 - pi / 2.0)
    phi1 = (-m2 * l1 * lc2 * dtheta2**2 * sin(theta2) - 2 * m2 * l1 * lc2 * dtheta2 * dtheta1 * sin(theta2)
            + (m1 * lc1 + m2 * l1) * g * cos(theta1 - pi / 2) + phi2)
    ddtheta2 = (a + d2 / d1 * phi1 - m2 * l1 * lc2 * dtheta1**2 * sin(theta2) - phi2) / (m2 * lc2**2 + I2 - d2**2 / d1)
    ddtheta1 = -(d2 * ddtheta2 + phi1) / d1
    return [dtheta1, dtheta2, ddtheta1, ddtheta2]


def acrobot_rk4(s, torque, dt=0.2):
    k1 = acrobot_dsdt(s, torque)
    k2 = acrobot_dsdt([s[i] + dt / 2.0 * k1[i] for i in range(4)], torque)
    k3 = acrobot_dsdt([s[i] + dt / 2.0 * k2[i] for i in range(4)], torque)
    k4 = acrobot_dsdt([s[i] + dt * k3[i] for i in range(4)], torque)
    return [s[i] + dt / 6.0 * (k1[i] + 2 * k2[i] + 2 * k3[i] + k4[i]) for i in range(4)]


def wrap(x):
    while x > pi:
        x -= 2 * pi
    while x < -pi:
        x += 2 * pi
    return x


def acrobot_step(s, action):
    n = acrobot_rk4(s, [-1.0, 0.0, 1.0][action])
    return [wrap(n[0]), wrap(n[1]), min(max(n[2], -4 * pi), 4 * pi), min(max(n[3], -9 * pi), 9 * pi)]


def height(s):
    return -cos(s[0]) - cos(s[1] + s[0])


def show(label, values):
    print(label, ", ".join(repr(v) for v in values))


r = SplitMix64(0)
show("SplitMix64 from 0:", [hex(r.next()) for _ in range(3)])
r = SplitMix64(42)
show("CartPole reset(42):", [r.uniform(-0.05, 0.05) for _ in range(4)])
r = SplitMix64(7)
show("Acrobot reset(7):", [r.uniform(-0.1, 0.1) for _ in range(4)])

s = (0.01, -0.02, 0.03, -0.04)
for a in (1, 0, 1):
    s = cartpole_step(s, a)
    show(f"CartPole tilted, action {a}:", s)
s, n = (0.0, 0.0, 0.0, 0.0), 0
while not cartpole_terminated(s):
    s, n = cartpole_step(s, 1), n + 1
print("CartPole always right: terminated at step", n, "theta", repr(s[2]))
s, worst = (0.0, 0.0, 0.0, 0.0), 0.0
for n in range(500):
    s = cartpole_step(s, 1 if s[2] + 0.5 * s[3] > 0 else 0)
    assert not cartpole_terminated(s)
    worst = max(worst, abs(s[2]))
print("CartPole lean controller: 500 steps, largest |theta| in degrees", worst * 180 / pi)

show("Acrobot one step from (0.1, -0.2, 0.3, -0.4), action 2:", acrobot_step([0.1, -0.2, 0.3, -0.4], 2))
show("Acrobot RK4 alone from (0, 0, 20, -40), torque 0:", acrobot_rk4([0.0, 0.0, 20.0, -40.0], 0.0))
show("Acrobot step from (0, 0, 20, -40), action 1:", acrobot_step([0.0, 0.0, 20.0, -40.0], 1))
lo, hi = 1.5, 2.5  # theta1 at rest, theta2 0, no torque: where the height after a step crosses 1
for _ in range(200):
    mid = (lo + hi) / 2
    lo, hi = (lo, mid) if height(acrobot_step([mid, 0.0, 0.0, 0.0], 1)) > 1.0 else (mid, hi)
show("Acrobot threshold theta1 below, above:", [lo, hi])
show("  heights after the step:", [height(acrobot_step([lo, 0.0, 0.0, 0.0], 1)), height(acrobot_step([hi, 0.0, 0.0, 0.0], 1))])
