// The project's own bodies in MuJoCo's MJCF, following what Gymnasium's documentation describes of
// its Hopper (four parts, three hinges with motors, a planar root: slide x, slide z, hinge y), with
// sizes, masses and gains of this project's choosing. Embedded, so that a process on any host loads
// it without a file; the humanoid is MuJoCo's own (libmujoco-samples).
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
    <geom name="floor" type="plane" size="50 2 0.1" friction="0.9 0.1 0.1"/>
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

}  // namespace fibra::rl::detail
