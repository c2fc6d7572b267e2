// One hover for every time chart of a page: pointing at a moment in one chart shows the
// same moment in the others (Grafana's shared crosshair). Dash loads every .js file in
// the assets folder; charts are bound as Plotly draws them, once each.
(function () {
  function timeCharts() {
    return Array.from(document.querySelectorAll('.js-plotly-plot')).filter(function (gd) {
      return gd._fullLayout && gd._fullLayout.xaxis && gd._fullLayout.xaxis.type === 'date';
    });
  }
  function others(gd, fn) {
    timeCharts().forEach(function (other) {
      if (other !== gd) { try { fn(other); } catch (e) { /* a chart redrawn meanwhile */ } }
    });
  }
  function bind(gd) {
    if (gd.__msHoverSync || typeof gd.on !== 'function') return;
    gd.__msHoverSync = true;
    gd.on('plotly_hover', function (ev) {
      // a hover we caused has no mouse event: do not echo it back
      if (!ev || !ev.event || !ev.points || !ev.points.length) return;
      var p = ev.points[0];
      // Fx.hover wants the axis' own number (ms since the epoch), not the date text
      var x = p.xaxis && p.xaxis.d2c ? p.xaxis.d2c(p.x) : Date.parse(String(p.x).replace(' ', 'T') + 'Z');
      others(gd, function (other) { Plotly.Fx.hover(other, {xval: x}, 'xy'); });
    });
    gd.on('plotly_unhover', function (ev) {
      if (!ev || !ev.event) return;
      others(gd, function (other) { Plotly.Fx.unhover(other); });
    });
  }
  new MutationObserver(function () { timeCharts().forEach(bind); })
    .observe(document.documentElement, {childList: true, subtree: true});
})();
