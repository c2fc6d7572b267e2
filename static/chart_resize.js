// A chart resize that changes no size is not a redraw. dcc.Graph asks plotly.js to resize
// each chart as it mounts (twice, once from its resize observer), and plotly.js answers each
// with a relayout 100 ms later, even when the chart already has its container's size:
// defaults recomputed, and a `plotly_relayout` event that Dash sends to the server as the
// chart's relayoutData (a page's zoom callbacks, one request per chart, all answering
// nothing). Here such a resize resolves at once, and so does one of a chart inside a hidden
// element (plotly.js checks only the chart's own display, so it relayouts it to a size it
// cannot measure); when the chart is shown, dcc.Graph's resize observer asks again. A resize
// that changes the size goes to plotly.js as before. Dash loads every .js file in the assets
// folder before plotly.js, which sets `window.Plotly` when it has run: the wrap is made then.
(function () {
  function unchanged(gd) {
    var full = gd && gd._fullLayout;
    if (!full || !full.autosize || !gd.layout || gd._resolveResize || !gd.isConnected) return false;
    var style = window.getComputedStyle(gd);
    var width = parseFloat(style.width), height = parseFloat(style.height);
    return width > 0 && height > 0 && Math.abs(full.width - width) <= 1 && Math.abs(full.height - height) <= 1;
  }
  function wrap(plotly) {
    var plots = plotly && plotly.Plots;
    if (!plots || typeof plots.resize !== 'function' || plots.resize.__msUnchanged) return;
    var resize = plots.resize;
    plots.resize = function (gd) {
      var div = typeof gd === 'string' ? document.getElementById(gd) : gd;
      var hidden = div && div.isConnected && div._fullLayout && !div.getClientRects().length;
      return hidden || unchanged(div) ? Promise.resolve(div) : resize.apply(this, arguments);
    };
    plots.resize.__msUnchanged = true;
  }
  if (window.Plotly) { wrap(window.Plotly); return; }
  var value;
  Object.defineProperty(window, 'Plotly', {
    configurable: true, enumerable: true,
    get: function () { return value; },
    set: function (v) { value = v; try { wrap(v); } catch (e) { /* plotly.js as it is */ } }
  });
})();
