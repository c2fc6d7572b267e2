// The dashboard's tables as one component each (metrics_ui/table.py): a table of Dash html
// components is a component per cell, and Dash's renderer wraps every one of them, which was
// most of a job page's rendering. Cells are text, or {text | parts, class, title, href}.
// Text is React text, never HTML; a link goes only to a path of this dashboard and moves as
// dcc.Link does, without reloading the page.
(function () {
  'use strict';
  var e = window.React.createElement;

  function localPath(href) {
    return typeof href === 'string' && /^\/(?![\/\\])/.test(href) ? href : undefined;
  }

  function navigate(ev) {
    if (ev.metaKey || ev.shiftKey || ev.altKey || ev.ctrlKey || ev.button !== 0) return;
    ev.preventDefault();
    window.history.pushState({}, '', ev.currentTarget.getAttribute('href'));
    window.dispatchEvent(new CustomEvent('_dashprivate_pushstate'));
    window.scrollTo(0, 0);
  }

  function inline(c, key) {
    if (c === null || c === undefined) return null;
    if (typeof c !== 'object') return String(c);
    var kids = Array.isArray(c.parts) ? c.parts.map(inline) : (c.text == null ? null : String(c.text));
    var props = {key: key, className: c['class'] || undefined, title: c.title || undefined};
    var href = localPath(c.href);
    if (href) {
      props.href = href;
      props.onClick = navigate;
      return e('a', props, kids);
    }
    return e('span', props, kids);
  }

  function Table(props) {
    var header = props.header || [], rows = props.rows || [];
    var body = rows.length ? rows.map(function (r, i) {
      return e('tr', {key: i}, r.map(function (c, j) { return e('td', {key: j}, inline(c)); }));
    }) : [e('tr', {key: 0}, e('td', {colSpan: header.length || 1, className: 'empty'}, String(props.empty || '')))];
    return e('table', {id: props.id, className: props.className},
             e('thead', null, e('tr', null, header.map(function (h, i) { return e('th', {key: i}, String(h)); }))),
             e('tbody', null, body));
  }

  window.ms_components = Object.assign(window.ms_components || {}, {Table: Table});
})();
