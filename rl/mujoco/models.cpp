// The project's own bodies in MuJoCo's MJCF, following what Gymnasium's documentation describes of
// its Hopper (four parts, three hinges with motors) and HalfCheetah (a torso and head, two legs of
// thigh, shin and foot, six hinges with motors), each on a planar root (slide x, slide z, hinge y),
// with sizes, masses, springs and gains of this project's choosing. Embedded, so that a process on
// any host loads them without a file; the humanoid is MuJoCo's own (libmujoco-samples).
#include "models.hpp"

namespace fibra::rl::detail {

// A one-legged hopper in the x-z plane: torso (0.36 m), thigh (0.42 m), leg (0.48 m), foot (0.36 m,
// 0.12 m of it behind the ankle). The root's slide in z has its reference at the torso's centre, so
// that qpos[1] is the torso's height (1.20 at rest, the foot's underside just above the floor) and
// qpos[2] its pitch. Motors of gear 180 at the hip, knee and ankle. Timestep 2 ms (frame skip 4:
// 8 ms a step).
const char* const hopper_xml = R"(<mujoco model="fibra_hopper">
  <compiler angle="degree" inertiafromgeom="true"/>
  <option timestep="0.002" integrator="RK4"/>
  <default>
    <joint armature="1" damping="1" limited="true"/>
    <geom condim="1" friction="0.9 0.1 0.1" density="1000" margin="0.001"/>
    <motor ctrllimited="true" ctrlrange="-1 1"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="50 2 0.1" condim="3" friction="0.9 0.1 0.1"/>
    <body name="torso" pos="0 0 1.2">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" ref="1.2" limited="false" armature="0" damping="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0"/>
      <geom name="torso" type="capsule" fromto="0 0 0.18 0 0 -0.18" size="0.055"/>
      <body name="thigh" pos="0 0 -0.18">
        <joint name="thigh_joint" type="hinge" axis="0 -1 0" range="-140 0"/>
        <geom name="thigh" type="capsule" fromto="0 0 0 0 0 -0.42" size="0.05"/>
        <body name="leg" pos="0 0 -0.42">
          <joint name="leg_joint" type="hinge" axis="0 -1 0" range="-140 0"/>
          <geom name="leg" type="capsule" fromto="0 0 0 0 0 -0.48" size="0.045"/>
          <body name="foot" pos="0 0 -0.48">
            <joint name="foot_joint" type="hinge" axis="0 -1 0" range="-40 40"/>
            <geom name="foot" type="capsule" fromto="-0.12 0 -0.06 0.24 0 -0.06" size="0.055" friction="1.8 0.1 0.1"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="thigh" joint="thigh_joint" gear="180"/>
    <motor name="leg" joint="leg_joint" gear="180"/>
    <motor name="foot" joint="foot_joint" gear="180"/>
  </actuator>
</mujoco>
)";

// A two-legged runner in the x-z plane: a torso of 0.9 m at 0.65 m with a head in front, a back
// and a front leg of thigh, shin and foot, each joint a damped spring with a motor. Only the
// floor collides with the body (contype 1, conaffinity 0 on the body's parts). Timestep 10 ms
// (frame skip 5: 50 ms a step).
const char* const half_cheetah_xml = R"(<mujoco model="fibra_half_cheetah">
  <compiler angle="radian" inertiafromgeom="true"/>
  <option timestep="0.01" integrator="RK4"/>
  <default>
    <joint armature="0.1" damping="2" limited="true" stiffness="100"/>
    <geom condim="3" contype="1" conaffinity="0" friction="0.5 0.1 0.1" size="0.045"/>
    <motor ctrllimited="true" ctrlrange="-1 1"/>
  </default>
  <worldbody>
    <geom name="floor" type="plane" size="300 2 0.1" conaffinity="1"/>
    <body name="torso" pos="0 0 0.65">
      <joint name="rootx" type="slide" axis="1 0 0" limited="false" armature="0" damping="0" stiffness="0"/>
      <joint name="rootz" type="slide" axis="0 0 1" limited="false" armature="0" damping="0" stiffness="0"/>
      <joint name="rooty" type="hinge" axis="0 1 0" limited="false" armature="0" damping="0" stiffness="0"/>
      <geom name="torso" type="capsule" fromto="-0.45 0 0 0.45 0 0" size="0.05"/>
      <geom name="head" type="capsule" fromto="0.45 0 0 0.6 0 0.12"/>
      <body name="bthigh" pos="-0.45 0 0">
        <joint name="bthigh" type="hinge" axis="0 1 0" range="-0.5 1.0" stiffness="200" damping="5"/>
        <geom name="bthigh" type="capsule" fromto="0 0 0 -0.1 0 -0.25"/>
        <body name="bshin" pos="-0.1 0 -0.25">
          <joint name="bshin" type="hinge" axis="0 1 0" range="-0.8 0.8" stiffness="150" damping="4"/>
          <geom name="bshin" type="capsule" fromto="0 0 0 0.1 0 -0.2"/>
          <body name="bfoot" pos="0.1 0 -0.2">
            <joint name="bfoot" type="hinge" axis="0 1 0" range="-0.4 0.8" stiffness="100" damping="2.5"/>
            <geom name="bfoot" type="capsule" fromto="0 0 0 0.04 0 -0.15"/>
          </body>
        </body>
      </body>
      <body name="fthigh" pos="0.45 0 0">
        <joint name="fthigh" type="hinge" axis="0 1 0" range="-1.0 0.7" stiffness="200" damping="5"/>
        <geom name="fthigh" type="capsule" fromto="0 0 0 0.08 0 -0.24"/>
        <body name="fshin" pos="0.08 0 -0.24">
          <joint name="fshin" type="hinge" axis="0 1 0" range="-1.2 0.9" stiffness="150" damping="4"/>
          <geom name="fshin" type="capsule" fromto="0 0 0 -0.05 0 -0.22"/>
          <body name="ffoot" pos="-0.05 0 -0.22">
            <joint name="ffoot" type="hinge" axis="0 1 0" range="-0.5 0.5" stiffness="50" damping="1.5"/>
            <geom name="ffoot" type="capsule" fromto="0 0 0 0.05 0 -0.14"/>
          </body>
        </body>
      </body>
    </body>
  </worldbody>
  <actuator>
    <motor name="bthigh" joint="bthigh" gear="110"/>
    <motor name="bshin" joint="bshin" gear="80"/>
    <motor name="bfoot" joint="bfoot" gear="50"/>
    <motor name="fthigh" joint="fthigh" gear="110"/>
    <motor name="fshin" joint="fshin" gear="80"/>
    <motor name="ffoot" joint="ffoot" gear="30"/>
  </actuator>
</mujoco>
)";

}  // namespace fibra::rl::detail
